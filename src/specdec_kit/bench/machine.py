"""How busy the machine is while the benchmark times: the cores other processes keep busy.

    busy = other_busy_cores()                      # before timing: cores in use by others over half a second
    warning = busy_warning(busy, threads=2)        # a sentence to print, or None

A benchmark that needs `threads` cores on a machine whose other processes already use most of them measures the
contention, not the decoders: its figures come out slower and noisier (the same code has measured 1.4x and 3.0x).
"""

from __future__ import annotations

import os

SLACK = 0.5  # cores: an idle desktop's background work stays below this


def cores() -> int:
    return os.cpu_count() or 1


def other_busy_cores(seconds: float = 0.5) -> float:
    """Cores kept busy by other processes over `seconds` while this one sleeps."""
    import psutil

    return psutil.cpu_percent(interval=seconds) / 100 * cores()


def too_busy(busy: float | None, threads: int, machine_cores: int) -> bool:
    """Whether other processes' `busy` cores and the benchmark's `threads` do not fit the machine's cores."""
    return busy is not None and busy + threads > machine_cores + SLACK


def busy_warning(busy: float | None, threads: int, when: str = "now") -> str | None:
    """A warning to print when this machine is `too_busy`, saying what to do; None when it is not."""
    if not too_busy(busy, threads, cores()):
        return None
    return (f"Warning: this machine is busier than its {cores()} cores {when}: other processes kept {busy:.1f} cores "
            f"busy while the benchmark times with {threads} thread{'s' if threads > 1 else ''}, so its figures come "
            "out slower and noisier than the decoders are. Close other programs (or wait for them to finish) and run "
            "the benchmark again.")
