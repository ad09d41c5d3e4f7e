"""nbgrader preprocessors that keep one bad submission from costing a whole autograde run.

The course's nbgrader_config.py names them (lines from `autograde_config` below); nbgrader imports this
module in its own process, so it needs the `instructor` extra (nbgrader) and is never imported by a notebook.

- `SkipDemoCells` (sanitize stage, before any kernel starts): a code cell tagged "demo" (benchmarks,
  plots: minutes of work, no points) is replaced by a comment, so grading never runs it.
- `GuardedExecute` (replaces nbgrader's Execute): a budget for the whole notebook (`notebook_timeout`) on top of
  the per-cell `timeout`, both in the kernel's own time (its CPU and its waits on nothing, `cell_watch.py`: a loaded
  machine does not stretch them; the clock stops a cell at WALL_FACTOR times its limit), and a kernel that dies
  (os._exit, a segfault, the OOM killer) or ignores the interrupt is reported in its cell instead of raising, which
  would make nbgrader delete the autograded notebook. Cells after the stop get a "NotRun" error output, so their
  tests score 0 and the rest of nbgrader (SaveAutoGrades) runs as usual. After a cell that ends in a
  MemoryError, the kernel lets go of the tracebacks IPython keeps, so what that cell's frames allocated is
  freed before the next cell (memory the notebook's own variables still hold stays held). The test cells
  named in `judged_outside` (the extra-credit ones, and the speed test, which the grader times alone: the
  kit's verdict gives their points) are not run: they get a line that says so.
- If the environment variable SPECDEC_RUN_RECORD names a file, GuardedExecute keeps a JSON record of
  the run there, rewritten before every cell, so it still says where grading was if nbgrader is killed
  from outside. `read_run_record` reads it back. Its keys:
      cells      number of code cells
      current    {"index", "label"} of the cell running now, null once the run is over
      finished   true once every cell has been run or marked NotRun
      seconds    time spent running cells so far, on the clock
      died       null, or {"index", "label", "returncode", "cause"} of the cell the kernel died in
      timed_out  null, or {"index", "label", "limit"}: the cell in which the notebook's budget ran out,
                 or whose time limit passed with the kernel not answering the interrupt
      interrupted  [{"index", "label", "limit"}] of the cells stopped at their time limit, the run going on after
      not_run    labels of the cells marked NotRun
  A label is the cell's nbgrader grade_id, else "cell <index>" (index among all cells of the notebook).
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer, List, Unicode, default

from specdec_kit.checks.core import WALL_FACTOR
from specdec_kit.core import settings
from specdec_kit.protocol.adapters import DEMO_TAG, is_graded_cell, is_test_cell

from ..core.nbgrader_course import import_name, list_setting
from ..sandbox.kernel import SandboxedKernelManager, sandbox_description
from .cell_watch import CellWatch, kernel_usage

RECORD_ENV = settings.RUN_RECORD
DEMO_STUB = "# demo cell: not run while grading (benchmarks and plots earn no points)"
JUDGED_OUTSIDE = "not run in the notebook's own run: the kit grades this test outside the notebook\n"
# nbclient reads a timeout of 0 as "no limit": a budget that is all but spent still needs a positive limit.
MIN_CELL_TIMEOUT = 0.1
RELEASE_SECONDS = 30
_RELEASE = """
import gc, sys
for name in ("last_type", "last_value", "last_traceback", "last_exc"):
    if hasattr(sys, name):
        setattr(sys, name, None)
shell = get_ipython()
shell.InteractiveTB.tb = None
shell.last_execution_result = None
gc.collect()
"""
RELEASE_TRACEBACKS = f"exec({_RELEASE!r}, {{'get_ipython': get_ipython}})"  # a namespace of its own
SIGNAL_HINTS = {
    signal.SIGSEGV: "segmentation fault (signal 11), a crash in native code",
    signal.SIGKILL: "killed (signal 9), often out of memory",
    signal.SIGABRT: "aborted (signal 6), a failed check in native code",
    signal.SIGBUS: "bus error (signal 7), a crash in native code",
}



def read_run_record(path: str | os.PathLike) -> dict | None:
    """The record GuardedExecute wrote at `path`, or None if there is none or it cannot be read."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def cell_label(cell: NotebookNode, index: int) -> str:
    """How the record and the error outputs name a cell: its nbgrader grade_id, else "cell <index>"."""
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"


def _in_cell(label: str) -> str:
    return label if label.startswith("cell ") else f"cell {label}"


def _is_code(cell: NotebookNode) -> bool:
    return cell.cell_type == "code"


class SkipDemoCells(NbGraderPreprocessor):
    """Replace every code cell tagged "demo" by a one-line comment, outputs cleared.

    A graded cell is never skipped: tags are not restored from the source notebook, so a student could
    otherwise tag a test cell "demo" to keep it from running.
    """

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        if not _is_code(cell) or DEMO_TAG not in cell.metadata.get("tags", []):
            return cell, resources
        if is_graded_cell(cell):
            self.log.warning("Cell %s is tagged %r but graded: it runs", cell_label(cell, index), DEMO_TAG)
            return cell, resources
        cell.source = DEMO_STUB
        cell.outputs = []
        cell.execution_count = None
        return cell, resources


@dataclass
class RunRecord:
    """What GuardedExecute has done so far; written as JSON to `path` (if any) by `write`."""

    path: str
    cells: int
    current: dict | None = None
    finished: bool = False
    seconds: float = 0.0
    died: dict | None = None
    timed_out: dict | None = None
    interrupted: list[dict] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    def write(self) -> None:
        if not self.path:
            return
        data = {key: value for key, value in asdict(self).items() if key != "path"}
        target = Path(self.path)
        # Written whole then renamed, so a reader (or a kill mid-write) never sees half a record.
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _error_output(ename: str, evalue: str) -> NotebookNode:
    # The traceback is what nbgrader and Jupyter show: the name in red, as for nbgrader's CellTimeoutError.
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"\x1b[0;31m{ename}\x1b[0m: {evalue}"])


def death_cause(returncode: int | None) -> str:
    """A student's reading of the kernel process's exit status (negative: killed by that signal)."""
    if returncode is None:
        return "the kernel process was lost (no exit status)"
    if returncode >= 0:
        return f"the process exited with status {returncode} (a call to os._exit, or a library that ended it)"
    number = -returncode
    if number in SIGNAL_HINTS:
        return SIGNAL_HINTS[number]
    name = signal.strsignal(number) or "unknown signal"
    return f"{name.lower()} (signal {number})"


class GuardedExecute(Execute):
    """nbgrader's Execute with a budget for the whole notebook, surviving a kernel that dies or hangs.

    Each cell may use the smaller of `timeout` and what is left of `notebook_timeout`, in the kernel's own time
    (`CellWatch`, which interrupts the kernel there, and a CellTimeoutError is recorded as nbclient's would be);
    nbclient's per-cell limit is the clock's backstop at WALL_FACTOR times that.
    After the budget runs out, the kernel dies, or the kernel ignores an interrupt, every later code cell
    gets a NotRun error output instead of running, and execution ends normally.
    """

    notebook_timeout = Integer(
        0, help="Seconds all cells of the notebook may run together; 0 for no limit.",
    ).tag(config=True)

    record_file = Unicode(
        help=f"File for the JSON record of the run; defaults to the environment variable {RECORD_ENV}.",
    ).tag(config=True)

    judged_outside = List(
        Unicode(), help="grade_ids of test cells not run here: the kit's verdict alone judges them.",
    ).tag(config=True)

    run_record: RunRecord | None = None
    _started: float | None = None  # the clock starts with the first cell, not with the kernel's launch
    _spent = 0.0  # the kernel's own time in the cells run so far (the budget's)
    _usage = None  # the kernel's CPU and waits for a core (`kernel_usage`), found once it runs
    _stop_reason: str | None = None  # set once the run stops: the NotRun message of every later cell

    @default("record_file")
    def _default_record_file(self) -> str:
        return settings.run_record()

    def preprocess(self, nb: NotebookNode, resources: dict | None = None, km=None) -> tuple[NotebookNode, dict]:
        if sandbox_description():
            self.kernel_manager_class = SandboxedKernelManager
        self.run_record = RunRecord(self.record_file, cells=sum(map(_is_code, nb.cells)))
        self._started = self._stop_reason = self._usage = None
        self._spent = 0.0
        self.timeout_func = self._cell_timeout
        self._save()
        nb, resources = super().preprocess(nb, resources, km)
        self.run_record.current, self.run_record.finished, self.run_record.seconds = None, True, self._elapsed()
        self._save()
        return nb, resources

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        if not _is_code(cell) or not cell.source.strip():
            return super().preprocess_cell(cell, resources, index)  # nbclient skips it
        if self._started is None:
            self._started = time.monotonic()
        label = cell_label(cell, index)
        if self._stop_reason is not None:
            self._mark_not_run(cell, label)
            return cell, resources
        if label in self.judged_outside and is_test_cell(cell):
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=JUDGED_OUTSIDE)]
            cell.execution_count = None
            return cell, resources
        self.run_record.current, self.run_record.seconds = {"index": index, "label": label}, self._elapsed()
        self._save()
        limit = self._cell_limit()
        self._usage = self._usage or kernel_usage(self.km)
        with CellWatch(self.km, self._usage, limit or math.inf) as watch:
            try:
                cell, resources = super().preprocess_cell(cell, resources, index)
            except DeadKernelError:
                if watch.killed:
                    self._kernel_unresponsive(cell, index, label, limit)
                else:
                    self._kernel_died(cell, index, label)
            except CellTimeoutError:
                self._kernel_unresponsive(cell, index, label, limit)
            else:
                if any(o.get("ename") == "MemoryError" for o in cell.outputs):
                    self._release_failed_frames(label)
                if watch.fired:
                    cell.outputs = [o for o in cell.outputs if o.get("ename") != "KeyboardInterrupt"]
                    cell.outputs.append(_error_output("CellTimeoutError", f"this cell {watch.fired}"))
                if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs):  # interrupted, and it answered
                    self.run_record.interrupted.append({"index": index, "label": label,
                                                        "limit": round(limit or 0, 1)})
        self._spent += watch.meter.used()
        if self._stop_reason is None and self._budget_left() == 0:
            self._stop(index, label, self.notebook_timeout,
                       f"the notebook's time limit of {self.notebook_timeout} s was reached in {_in_cell(label)}")
        return cell, resources

    def _elapsed(self) -> float:
        return 0.0 if self._started is None else round(time.monotonic() - self._started, 3)

    def _budget_left(self) -> float | None:
        if self.notebook_timeout <= 0:
            return None
        return max(0.0, self.notebook_timeout - self._spent)

    def _cell_limit(self) -> float | None:
        """The kernel's own time the next cell may use (None: no limit)."""
        per_cell = self.timeout if self.timeout and self.timeout > 0 else None  # nbclient: None or <= 0 is no limit
        limits = [t for t in (per_cell, self._budget_left()) if t is not None]
        return max(min(limits), MIN_CELL_TIMEOUT) if limits else None

    def _cell_timeout(self, cell: NotebookNode) -> float | None:
        """nbclient's limit on the clock: the backstop."""
        limit = self._cell_limit()
        return None if limit is None else limit * WALL_FACTOR

    def _kernel_died(self, cell: NotebookNode, index: int, label: str) -> None:
        returncode = _kernel_returncode(self.km)
        cause = death_cause(returncode)
        self.log.error("The kernel died in %s: %s", label, cause)
        cell.outputs.append(_error_output("KernelDied", f"the kernel died while running this cell: {cause}"))
        self.run_record.died = {"index": index, "label": label, "returncode": returncode, "cause": cause}
        self._stop_reason = f"the kernel died in {_in_cell(label)}"

    def _kernel_unresponsive(self, cell: NotebookNode, index: int, label: str, limit: float | None) -> None:
        # The kernel was interrupted at the time limit but stayed busy: every later cell would queue behind it.
        limit = None if limit is None else round(limit, 1)
        limit_text = "" if limit is None else f" (time limit {limit:g} s)"
        cell.outputs.append(_error_output(
            "KernelUnresponsive", f"the kernel stopped answering while this cell ran{limit_text} and did not stop "
                                  "when interrupted"))
        self._stop(index, label, limit, f"the kernel stopped answering in {_in_cell(label)}")

    def _release_failed_frames(self, label: str) -> None:
        # A failed cell's frames live on in the traceback IPython keeps (sys.last_*, the formatter's own
        # copy): with memory at the limit, the next cell would fail or abort in native code.
        try:
            run_sync(self.kc.execute_interactive)(RELEASE_TRACEBACKS, silent=True, store_history=False,
                                                  timeout=RELEASE_SECONDS)
        except Exception as e:  # noqa: BLE001 - a report on grading, never a reason to stop it
            self.log.warning("Could not release the memory %s held: %s", label, e)

    def _stop(self, index: int, label: str, limit: float | None, reason: str) -> None:
        self.log.error("Not running the cells after %s: %s", label, reason)
        self.run_record.timed_out = {"index": index, "label": label, "limit": limit}
        self._stop_reason = reason

    def _mark_not_run(self, cell: NotebookNode, label: str) -> None:
        cell.outputs = [_error_output("NotRun", f"not run: {self._stop_reason}")]
        cell.execution_count = None
        self.run_record.not_run.append(label)
        self._save()

    def _save(self) -> None:
        # The record is a report on grading, never a reason to stop it.
        try:
            self.run_record.write()
        except OSError as e:
            self.log.warning("Could not write the run record to %s: %s", self.run_record.path, e)


def _kernel_returncode(km) -> int | None:
    """The exit status of a local kernel's process (jupyter_client's LocalProvisioner), None if unknown."""
    if isinstance(km, SandboxedKernelManager):
        return km.sandboxed_returncode
    process = getattr(getattr(km, "provisioner", None), "process", None)
    return None if process is None else process.poll()


def autograde_config(notebook_timeout: int, cell_timeout: int, judged_outside: list[str] = ()) -> list[str]:
    """Lines of nbgrader_config.py: nbgrader's default autograde preprocessors with the kit's swapped in.

    The defaults are read from the installed nbgrader and written out by name, so the config says exactly
    what runs. `notebook_timeout` bounds the whole notebook (0: no bound), `cell_timeout` each cell;
    the test cells `judged_outside` (grade_ids) are not run in the kernel.
    """
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    traits = Autograde.class_traits()
    sanitize = [import_name(p) for p in traits["sanitize_preprocessors"].default()]
    sanitize.append(import_name(SkipDemoCells))  # after OverwriteCells, which restores locked cells' source
    autograde = [import_name(GuardedExecute if p is Execute else p)
                 for p in traits["autograde_preprocessors"].default()]
    return [*list_setting("c.Autograde.sanitize_preprocessors", sanitize),
            *list_setting("c.Autograde.autograde_preprocessors", autograde),
            f"c.GuardedExecute.notebook_timeout = {int(notebook_timeout)}",
            f"c.GuardedExecute.timeout = {int(cell_timeout)}",
            f"c.GuardedExecute.judged_outside = {list(judged_outside)!r}"]
