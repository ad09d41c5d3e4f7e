"""A loaded machine, made on purpose: this thread and spinning processes share one core, so each of the thread's
seconds on the clock gives it about 1 / (spinners + 1) of a CPU second, as on a shared server.

    with one_busy_core(spinners=2):
        ...   # 0.4 s of this thread's CPU now takes about 1.2 s on the clock
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys


@contextlib.contextmanager
def one_busy_core(spinners: int):
    before = os.sched_getaffinity(0)
    core = min(before)
    spin = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    processes = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(spinners)]
    os.sched_setaffinity(0, {core})  # this thread only: torch's threads keep their cores
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        for process in processes:
            process.kill()
            process.wait()
