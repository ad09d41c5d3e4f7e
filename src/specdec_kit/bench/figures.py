"""Measured figures, each written once, by the command that measured it, as a Markdown page the docs link to.

    write_page(out / "bench.md", "Benchmark: synthetic-small", "specdec-kit bench --pair synthetic-small ...",
               table_text, image="bench.png")

The page says what was measured, with which command, when, on which machine and with which versions, then
holds the command's own table as printed (and its plot). docs/benchmarks.md links these pages instead of
copying their numbers.
"""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path


def machine() -> str:
    """This machine in a few words: processor, cores, Python and the versions that set the figures."""
    import torch
    import transformers

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.processor() or platform.machine()}, {cores} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}")


def write_page(path: Path, title: str, command: str, text: str, image: str | None = None, note: str = "") -> Path:
    """A Markdown page: the title, how and where it was measured, `note`, the command's table and `image`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "",
             f"Measured on {datetime.date.today().isoformat()} ({machine()}) by", "",
             "```bash", command, "```", ""]
    if note:
        lines += [note, ""]
    lines += ["```", text.rstrip("\n"), "```", ""]
    if image:
        lines += [f"![{title}]({image})", ""]
    path.write_text("\n".join(lines))
    return path
