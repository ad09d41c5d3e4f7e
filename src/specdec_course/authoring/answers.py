"""The visible checks' answers, recorded for the student package (`specdec_kit/checks/answers.json`).

    text = render_answers(Path("solutions/speculative_decoding.ipynb"), Path("autograder"))

The visible check of each test in the grading plan (`autograder/hidden.py`, the first of its checks) runs on
the solution's classes with the oracle behind a recorder, so every question those checks ask is written
down with its answer, failure paths' included, and so are the correct rounds of check_exact's cases, which a test
cell draws over a decode that failed. `specdec-course release` writes the file and
`release --check` fails on a stale one, as on a stale notebook: the checkout's file, never an installed copy's
(`release.checkout_answers` gives the path).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from tqdm.auto import tqdm

from specdec_kit.checks import LocalRunner
from specdec_kit.checks.answers import FORMAT_VERSION, RecordedAnswers, from_record, key, to_record
from specdec_kit.checks.decoding import EXACT_QUESTIONS
from specdec_kit.protocol.adapters import load_decoder_classes

from ..core.oracle import ORACLE, Oracle
from ..core.plan import load_plan


class Recorder(RecordedAnswers):
    """The oracle's answers, each question and answer recorded as `answers.json` holds them."""

    def __init__(self, oracle: Oracle = ORACLE):
        super().__init__({})
        self.oracle = oracle

    def _answer(self, method: str, *args):
        record = json.loads(json.dumps(to_record(getattr(self.oracle, method)(*args))))
        self.records.setdefault(method, {})[key(args)] = record
        return from_record(method, record)  # what a notebook will read back


def render_answers(solution: Path, autograder_dir: Path) -> str:
    """answers.json's text: the visible checks that take `answers`, run on the solution with a Recorder."""
    plan = load_plan(autograder_dir)
    visible = [(class_name, checks[0]) for class_name, checks in plan.tests.values()
               if "answers" in inspect.signature(checks[0]).parameters]
    classes = load_decoder_classes(solution, tuple(dict.fromkeys(name for name, _ in visible)))
    recorder = Recorder()
    for class_name, check in tqdm(visible, desc="the visible checks' answers", unit="check"):  # on stderr
        check(LocalRunner(classes[class_name]), answers=recorder)
    for question in EXACT_QUESTIONS:  # asked only where a test cell draws a decode of check_exact that failed
        recorder.exact_rounds(*question)
    records = {method: dict(sorted(answers.items())) for method, answers in sorted(recorder.records.items())}
    document = {"version": FORMAT_VERSION,
                "about": "What correct decoding does on the visible checks' cases; written by specdec-course "
                         "release from the course's oracle. Never edit by hand.",
                "answers": records}
    return json.dumps(document, indent=1) + "\n"


def write_answers(solution: Path, autograder_dir: Path, path: Path) -> Path:
    path.write_text(render_answers(solution, autograder_dir))
    return path


def answers_current(solution: Path, autograder_dir: Path, path: Path) -> bool:
    return path.is_file() and path.read_text() == render_answers(solution, autograder_dir)
