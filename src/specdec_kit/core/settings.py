"""Every environment variable the kit reads or sets, read here and nowhere else.

- `SPECDEC_GRADING`: `1` while grading. Nothing installs, no hub model loads, demo cells use `tiny`, and
  the notebook's own speed test stops after its first check. Default: unset.
- `SPECDEC_SELFTEST`: `1` under `specdec-course selftest`: the grader's speed test times one repeat, not two.
- `SPECDEC_THREADS`: torch CPU threads of the checks, the grading processes and their children (2).
- `SPECDEC_TEST_THREADS`: torch CPU threads of the kit's own test suite (2).
- `SPECDEC_KIT_CACHE`: where the offline zoo is built (`$XDG_CACHE_HOME/specdec-kit`, else
  `~/.cache/specdec-kit`).
- `SPECDEC_RUN_RECORD`: the file nbgrader's `GuardedExecute` keeps its run record in; `specdec-course
  autograde` sets it for each student.

The notebook's locked set-up cell reads `SPECDEC_GRADING` itself: it runs before the kit is installed.
"""

from __future__ import annotations

import os
from pathlib import Path

GRADING = "SPECDEC_GRADING"
SELFTEST = "SPECDEC_SELFTEST"
THREADS = "SPECDEC_THREADS"
TEST_THREADS = "SPECDEC_TEST_THREADS"
CACHE = "SPECDEC_KIT_CACHE"
RUN_RECORD = "SPECDEC_RUN_RECORD"
DEFAULT_THREADS = 2


def grading() -> bool:
    """True while the autograder runs the notebook."""
    return os.environ.get(GRADING) == "1"


def selftest() -> bool:
    return os.environ.get(SELFTEST) == "1"


def threads() -> int:
    return int(os.environ.get(THREADS, DEFAULT_THREADS))


def test_threads() -> int:
    return int(os.environ.get(TEST_THREADS, DEFAULT_THREADS))


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdec-kit"
    return Path(os.environ.get(CACHE, default))


def run_record() -> str:
    return os.environ.get(RUN_RECORD, "")
