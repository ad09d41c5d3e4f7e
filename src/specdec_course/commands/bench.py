"""`specdec-course bench`: the student package's benchmark with HF's own methods' rounds (bench/hf_methods.py)."""

from __future__ import annotations

from specdec_kit.cli import add_bench_command


def register(commands) -> None:
    add_bench_command(commands, "specdec_course.bench.hf_methods", "specdec-course bench --pair tiny --k 2,4 --methods "
                      "target_greedy,cached,prompt_lookup,hf_prompt_lookup --limit 4")
