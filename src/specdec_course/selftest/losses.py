"""Which tests an entry of the catalogue loses, by the checks alone: every check of the grading plan (visible, then
hidden; the speed test's gate, not its timing) run in this process on the entry's classes, without nbgrader,
sandbox or timing. Minutes for an entry, where the selftest grades it through the whole pipeline.

    found = losses(entry, Path("autograder"), Path("solutions/speculative_decoding.ipynb"), Path("/tmp/x"))
    sorted(found)          # the tests it loses, each with the words of its first failing check

With `progress`, a bar on stderr counts the tests run (`specdec-course catalogue --losses` shows it).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from specdec_kit.checks.core import CheckTimeout
from specdec_kit.checks.speed import SPEED_TEST, not_timed
from specdec_kit.core.no_progress import NoProgress
from specdec_kit.protocol.adapters import load_decoder_classes

from ..core.plan import load_plan
from .catalogue import Entry, make_submission


def notebook_losses(notebook: nbformat.NotebookNode, path: Path, autograder_dir: Path,
                    tests: list[str] | None = None, progress: bool = False) -> dict[str, str]:
    """test -> the words of its first failing check (with the notes the kit adds to a student's exception), for each
    of `tests` (default: all) that `notebook`'s classes lose; `path` is where the notebook is written to be loaded.
    `progress`: a bar on stderr over the tests, named after `path`, cleared when done."""
    plan = load_plan(autograder_dir)
    nbformat.write(notebook, path)
    classes = load_decoder_classes(path, tuple(sorted({name for name, _ in plan.tests.values()})))
    found = {}
    with tqdm(tests or list(plan.tests), desc=path.stem, unit="test", leave=False, disable=not progress) as bar:
        for test in bar:
            bar.set_postfix_str(test)
            class_name, test_checks = plan.tests[test]
            try:
                for check in test_checks:
                    check(classes[class_name])
            except (Exception, NoProgress, CheckTimeout) as e:  # CheckFailed, the student's own exception, a loop
                found[test] = "\n".join([f"{type(e).__name__}: {e}", *getattr(e, "__notes__", [])])  # the kit's notes
    why = not_timed(found)  # as the verdict rules, before timing
    if why and SPEED_TEST in (tests or plan.tests):
        found.setdefault(SPEED_TEST, why)
    return found


def losses(entry: Entry, autograder_dir: Path, solution: Path, work: Path, progress: bool = False) -> dict[str, str]:
    """The tests `entry` loses by its checks; `test_speedup` only where its gate fails (timing is the selftest's)."""
    return notebook_losses(make_submission(solution, entry), work / f"{entry.name}.ipynb", autograder_dir,
                           progress=progress)


