"""How torch's threads wait in every process grading starts: asleep (OMP_WAIT_POLICY=PASSIVE), not spinning, unless the
environment says otherwise. Grading runs processes of two threads each beside each other (and beside other work) on
the machine's cores, where threads that spin while they wait for work took about three times the CPU a decode needs
(docs/benchmarks.md); measured by its cost, the speed test's ratio does not move.

    quiet_waits()          # first in a grading command, before torch is imported: its children inherit it
"""

from __future__ import annotations

import os

OMP_WAIT = "OMP_WAIT_POLICY"


def quiet_waits() -> None:
    os.environ.setdefault(OMP_WAIT, "PASSIVE")
