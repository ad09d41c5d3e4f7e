"""A notebook's cell watched in the kernel's own time (`sandbox.meter.Meter`: its CPU and its waits on nothing), not
the machine's clock: once the cell has used its limit the kernel is interrupted, as nbclient would at a timeout, and
killed if it has not answered the interrupt GRACE seconds later. nbclient's own timeout stays as the clock's
backstop, at WALL_FACTOR times the limit.

    with CellWatch(km, kernel_usage(km), seconds=300) as watch:
        ...                      # nbclient runs the cell
    watch.fired                  # "" or how the limit was reached; watch.killed: it did not answer the interrupt
    watch.meter.used()           # the cell's own time, charged to the notebook's budget
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from specdec_kit.core import settings
from specdec_kit.core.run_delay import pids_delay

from ..sandbox.meter import Meter, pids_cpu, process_cpu

GRACE = 10  # seconds a kernel has to answer an interrupt before it is killed
LOOK = 1.0  # seconds between looks at the meter


def kernel_usage(km):
    """(the kernel's CPU, its threads' waits for a core), as functions of no arguments (`Meter`'s `cpu` and
    `delay`): its sandbox's, from its cgroup where one counts the CPU, else its processes'."""
    box = getattr(km, "box", None)  # a SandboxedKernelManager's
    if box is None:
        pid = km.provisioner.process.pid
        return process_cpu(pid), pids_delay(lambda: [pid])
    return box.cpu_seconds if box.cpu_seconds() is not None else pids_cpu(box.pids), pids_delay(box.pids)


class CellWatch:
    def __init__(self, km, usage, seconds: float):
        cpu, delay = usage
        self.meter, self.fired, self.killed = Meter(seconds, cpu, settings.threads(), delay), "", False  # the kernel's
        self._km, self._done = km, threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cell watch", daemon=True)

    def __enter__(self) -> CellWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(LOOK):
            if self.meter.left() <= 0:
                self.fired = self.meter.why()
                with contextlib.suppress(Exception):  # a kernel already gone: nbclient reports it
                    asyncio.run(self._km.interrupt_kernel())
                if not self._done.wait(GRACE):
                    self.killed = True
                    with contextlib.suppress(Exception):
                        asyncio.run(self._km.provisioner.kill())
                return
