"""Running a submission's code where it reaches nothing of the course: the operating system's sandbox (`box.py`, with
`uids.py`, `processes.py`, `enter.py`), the notebook's kernel in it (`kernel.py`), and the verdict's processes: a host
(`host.py`, `host_main.py`) and its children (`child.py`), the check pairs' models run for them (`models.py`), the
kit's side of the speed test (`baseline.py`) and one timing at a time on the clock (`timing_gate.py`)."""
