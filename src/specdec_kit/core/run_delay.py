"""How long a process's threads have been ready to run but waited for a core: the scheduler's run delay, which a
loaded machine adds to the clock and which no time limit should count.

    delay = pids_delay(lambda: [pid])    # seconds, summed over the threads of those processes ever seen
    run_delay(pid, tid)                  # one thread's, from /proc/<pid>/task/<tid>/schedstat; None where not kept
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def run_delay(pid: int, tid: int) -> float | None:
    """The seconds thread `tid` of process `pid` has been runnable but waiting for a core; None once it is gone, or
    where the kernel keeps no such count."""
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def pids_delay(pids: Callable[[], list[int]]) -> Callable[[], float]:
    """The seconds the threads of the processes `pids()` names have been runnable but waiting for a core, summed
    over every thread ever seen (one that ends keeps what it had; a thread number used again starts anew)."""
    seen: dict[tuple[int, int], float] = {}
    total = [0.0]

    def delay() -> float:
        for pid in pids():
            with contextlib.suppress(OSError):
                for tid in map(int, os.listdir(f"/proc/{pid}/task")):
                    if (now := run_delay(pid, tid)) is not None:
                        before = seen.get((pid, tid), 0.0)
                        total[0] += now - before if now >= before else now
                        seen[pid, tid] = now
        return total[0]

    return delay
