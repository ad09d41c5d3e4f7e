"""The kit's nbgrader preprocessors under real `nbgrader autograde`: a kernel that dies, a cell that never
ends, a demo cell, and the run record each leaves behind.

One throwaway course is shared by the module; each behaviour is one student's submission, autograded once
(about 8 s each) the first time a test asks for it.

Example run: python -m pytest tests/course/grading/test_preprocessors.py -q
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config.loader import PyFileConfigLoader

from specdec_course.core.nbgrader_course import nbgrader_env
from specdec_course.grading import cell_watch, preprocessors
from specdec_course.grading.preprocessors import GuardedExecute, SkipDemoCells, autograde_config, read_run_record
from specdec_kit.checks.core import WALL_FACTOR

NOTEBOOK_TIMEOUT = 8  # seconds for all cells of a notebook: the endless loop is stopped by this
CELL_TIMEOUT = 60  # longer than the budget, so a stop within it can only come from the budget
AUTOGRADE_TIMEOUT = 120  # a hung nbgrader fails the test instead of stalling the suite
ANSWER, TEST, DEMO, BONUS = 0, 1, 3, 4  # cell indices of the notebook below; cell 2 is a plain cell
SUBMISSIONS = {  # student -> source of the answer cell
    "normal": "answer = 42",
    "exits": "import os\nos._exit(3)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "loops": "answer = 42\nwhile True:\n    pass",
    "sysexit": "import sys\nanswer = 42\nsys.exit()",
}


def nbgrader_cell(source: str, **nbgrader) -> nbformat.NotebookNode:
    return new_code_cell(source, metadata={"nbgrader": {"schema_version": 3, **nbgrader}})


def source_notebook() -> nbformat.NotebookNode:
    """An answer cell, its locked test, a plain cell, then a demo cell and a test cell judged outside the kernel,
    both failing if they ever run."""
    return new_notebook(cells=[
        nbgrader_cell("### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", grade=False, grade_id="answer",
                      locked=False, solution=True),
        nbgrader_cell('"""Check the answer"""\nassert answer == 42, "answer must be 42"', grade=True,
                      grade_id="t1", points=1, locked=True, solution=False),
        new_code_cell("after = True"),
        new_code_cell("raise RuntimeError('the demo cell ran')", metadata={"tags": ["demo"]}),
        nbgrader_cell("raise RuntimeError('the bonus test ran')", grade=True, grade_id="bonus", points=0,
                      locked=True, solution=False),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


@dataclass
class Graded:
    process: subprocess.CompletedProcess
    notebook: nbformat.NotebookNode | None  # the autograded notebook, None if nbgrader wrote none
    record: dict | None

    def errors(self, index: int) -> list[nbformat.NotebookNode]:
        return [o for o in self.notebook.cells[index].outputs if o.output_type == "error"]

    def describe(self) -> str:
        return f"nbgrader exit {self.process.returncode}, stderr tail:\n{self.process.stderr[-2000:]}"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    lines = ["c = get_config()", "c.CourseDirectory.course_id = 'x'", *autograde_config(NOTEBOOK_TIMEOUT, CELL_TIMEOUT,
                                                                                       judged_outside=["bonus"])]
    (course / "nbgrader_config.py").write_text("\n".join(lines) + "\n")
    (course / "source" / "ps").mkdir(parents=True)
    nbformat.write(source_notebook(), course / "source" / "ps" / "ps.ipynb")
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ps", "--force"], cwd=course,
                          env=nbgrader_env(), capture_output=True, text=True, timeout=AUTOGRADE_TIMEOUT)
    assert done.returncode == 0, f"generate_assignment failed:\n{done.stdout}\n{done.stderr}"
    return course


@pytest.fixture(scope="module")
def graded(course):
    """graded(student): that student's submission autograded (once per module), with its run record."""
    results: dict[str, Graded] = {}

    def grade(student: str) -> Graded:
        if student not in results:
            results[student] = autograde(course, student, SUBMISSIONS[student])
        return results[student]

    return grade


def autograde(course: Path, student: str, answer: str) -> Graded:
    notebook = nbformat.read(course / "release" / "ps" / "ps.ipynb", as_version=4)
    notebook.cells[ANSWER].source = answer
    submitted = course / "submitted" / student / "ps" / "ps.ipynb"
    submitted.parent.mkdir(parents=True)
    nbformat.write(notebook, submitted)
    record = course / f"record-{student}.json"
    env = {**nbgrader_env(), preprocessors.RECORD_ENV: str(record)}
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "ps", "--student", student, "--create",
                           "--force"], cwd=course, env=env, capture_output=True, text=True, timeout=AUTOGRADE_TIMEOUT)
    output = course / "autograded" / student / "ps" / "ps.ipynb"
    notebook = nbformat.read(output, as_version=4) if output.is_file() else None
    return Graded(done, notebook, read_run_record(record))


def gradebook_score(course: Path, student: str, grade_id: str) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook("ps", "ps", student)
        return {g.name: float(g.score) for g in notebook.grades}[grade_id]


def assert_not_run_after(result: Graded, index: int, reason: str) -> None:
    """Every code cell after `index` holds exactly one NotRun error that gives `reason`, and is in the record."""
    for later in range(index + 1, len(result.notebook.cells)):
        errors = result.errors(later)
        assert [e.ename for e in errors] == ["NotRun"], f"cell {later} should be NotRun, has {errors}"
        assert reason in errors[0].evalue, f"NotRun of cell {later} should say {reason!r}: {errors[0].evalue!r}"
    expected = [preprocessors.cell_label(cell, i) for i, cell in enumerate(result.notebook.cells) if i > index]
    assert result.record["not_run"] == expected, f"record's not_run should be {expected}: {result.record}"


def kernel_death_in_answer(result: Graded) -> str:
    """The answer cell's KernelDied message, once checked that the kernel died there and nothing ran after."""
    assert_graded(result)
    errors = result.errors(ANSWER)
    assert [e.ename for e in errors] == ["KernelDied"], f"the answer cell should show KernelDied: {errors}"
    assert_not_run_after(result, ANSWER, "the kernel died in cell answer")
    return errors[0].evalue


def assert_graded(result: Graded) -> None:
    assert result.process.returncode == 0, f"nbgrader autograde should succeed; {result.describe()}"
    assert result.notebook is not None, f"nbgrader should write the autograded notebook; {result.describe()}"
    assert result.record is not None, f"GuardedExecute should write the run record; {result.describe()}"
    assert result.record["finished"] and result.record["current"] is None, \
        f"the run should end normally, with no current cell: {result.record}"


def test_config_swaps_execute_and_adds_demo_skip(tmp_path):
    lines = autograde_config(600, 300, judged_outside=["test_sampling"])
    (tmp_path / "nbgrader_config.py").write_text("\n".join(["c = get_config()", *lines]) + "\n")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    autograde = config.Autograde.autograde_preprocessors
    assert autograde[0] == "specdec_course.grading.preprocessors.GuardedExecute", f"Execute replaced first: {autograde}"
    assert not any(name.endswith(".Execute") for name in autograde), f"nbgrader's Execute must be gone: {autograde}"
    assert any(name.endswith(".SaveAutoGrades") for name in autograde), f"SaveAutoGrades must stay: {autograde}"
    sanitize = config.Autograde.sanitize_preprocessors
    skip, overwrite = (sanitize.index(f"{module}.{name}") for module, name in [
        ("specdec_course.grading.preprocessors", "SkipDemoCells"),
        ("nbgrader.preprocessors.overwritecells", "OverwriteCells")])
    assert skip > overwrite, f"demo cells should be skipped after OverwriteCells restores locked cells: {sanitize}"
    assert config.GuardedExecute.notebook_timeout == 600 and config.GuardedExecute.timeout == 300, \
        f"both time limits should be set: {config.GuardedExecute}"
    assert config.GuardedExecute.judged_outside == ["test_sampling"], f"cells not run: {config.GuardedExecute}"
    assert all(len(line) <= 120 for line in lines), "config lines should stay readable"


def test_read_run_record_missing_or_garbled(tmp_path):
    assert read_run_record(tmp_path / "absent.json") is None, "a missing record should read as None"
    (tmp_path / "garbled.json").write_text('{"cells": 4, "curr')
    assert read_run_record(tmp_path / "garbled.json") is None, "half a record should read as None"
    (tmp_path / "list.json").write_text("[1, 2]")
    assert read_run_record(tmp_path / "list.json") is None, "a record that is not an object should read as None"


@pytest.mark.parametrize("returncode,words", [
    (3, "status 3"), (-11, "segmentation fault (signal 11)"), (-9, "killed (signal 9), often out of memory"),
    (-15, "signal 15"), (None, "no exit status"),
])
def test_death_cause_names_status_or_signal(returncode, words):
    cause = preprocessors.death_cause(returncode)
    assert words in cause, f"exit status {returncode} should be explained with {words!r}, got {cause!r}"


def test_graded_demo_cell_still_runs():
    notebook = source_notebook()
    notebook.cells[TEST].metadata["tags"] = ["demo"]  # a student's attempt to skip the test cell
    skipped, _ = SkipDemoCells().preprocess(notebook, {})
    assert "assert answer == 42" in skipped.cells[TEST].source, "a graded cell tagged demo must keep its source"
    assert skipped.cells[DEMO].source == preprocessors.DEMO_STUB, "an ungraded demo cell should become the stub"


def test_cell_limit_is_the_smaller_of_cell_and_budget_and_the_clock_a_backstop_past_it():
    execute = GuardedExecute(timeout=300, notebook_timeout=600)
    execute._spent = 550  # 50 s of the budget left
    assert execute._cell_limit() == pytest.approx(50), "the budget's rest should bound the cell"
    assert execute._cell_timeout(None) == pytest.approx(50 * WALL_FACTOR), "nbclient's clock: the backstop"
    execute.timeout = 30
    assert execute._cell_limit() == 30, "a per-cell timeout below the budget's rest should apply"
    execute.notebook_timeout = 0
    assert execute._cell_limit() == 30, "notebook_timeout 0 means no budget"


LOADED_CELL = """import os, subprocess, sys, time
spin = "import os\\nos.sched_setaffinity(0, {0})\\nwhile True:\\n    pass\\n"
spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
os.sched_setaffinity(0, {0})
until = time.thread_time() + 1.5
while time.thread_time() < until:
    pass
for spinner in spinners:
    spinner.kill()
done = True
"""


@pytest.mark.slow
def test_a_cell_on_a_loaded_core_keeps_its_limit_which_the_clock_would_have_cut(tmp_path, monkeypatch):
    """1.5 s of the kernel's CPU under a limit of 3 s, on a core two spinning processes share (about 4.5 s on the
    clock): the cell runs to its end (cell_watch.py counts the kernel's CPU); with the limit on the clock, as the kit
    had it, it is cut off."""
    notebook = new_notebook(cells=[new_code_cell(LOADED_CELL)], metadata=source_notebook().metadata)

    def run() -> list[str]:
        execute = GuardedExecute(notebook_timeout=0, timeout=3, record_file=str(tmp_path / "record.json"))
        executed, _ = execute.preprocess(nbformat.from_dict(notebook), {})
        return [o.ename for o in executed.cells[0].outputs if o.output_type == "error"]

    assert run() == [], "the loaded cell used half its limit and must run to its end"
    monkeypatch.setattr(preprocessors, "WALL_FACTOR", 1)  # the limit on the clock alone
    assert run()[-1:] == ["CellTimeoutError"], "on the clock alone, the same cell runs past its limit"


def test_unwritable_record_does_not_stop_grading(tmp_path):
    execute = GuardedExecute(record_file=str(tmp_path / "missing" / "record.json"))
    execute.run_record = preprocessors.RunRecord(execute.record_file, cells=1)
    execute._save()  # must log, not raise
    assert not (tmp_path / "missing").exists(), "no record can be written into a missing directory"


def test_kernel_deaf_to_interrupts_stops_the_run(tmp_path, monkeypatch):
    """A cell that ignores SIGINT outlives its interrupt: nbclient raises, GuardedExecute reports and stops."""
    monkeypatch.setattr(cell_watch, "GRACE", 1)  # seconds it waits for the answer that never comes
    deaf = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    notebook = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell(deaf), new_code_cell("y = 2")],
                            metadata=source_notebook().metadata)
    record = tmp_path / "record.json"
    execute = GuardedExecute(notebook_timeout=1, timeout=CELL_TIMEOUT, iopub_timeout=1, record_file=str(record),
                             shutdown_kernel="immediate")  # a deaf kernel would use up the graceful wait
    executed, _ = execute.preprocess(notebook, {})
    errors = [o.ename for o in executed.cells[1].outputs if o.output_type == "error"]
    assert errors == ["KernelUnresponsive"], f"the deaf cell should show KernelUnresponsive, has {errors}"
    assert [o.ename for o in executed.cells[2].outputs] == ["NotRun"], "the cell after it should be NotRun"
    saved = read_run_record(record)
    assert saved["finished"] and saved["timed_out"]["label"] == "cell 1" and saved["not_run"] == ["cell 2"], \
        f"the record should name the deaf cell and the one not run: {saved}"


@pytest.mark.slow
def test_normal_notebook_runs_to_the_end(graded):
    result = graded("normal")
    assert_graded(result)
    cells = len(result.notebook.cells)  # all code cells
    assert result.record["cells"] == cells, f"the record should count {cells} code cells: {result.record}"
    assert result.record["died"] is None and result.record["timed_out"] is None and not result.record["not_run"] \
        and not result.record["interrupted"], f"nothing should have stopped the run: {result.record}"
    assert not any(result.errors(i) for i in range(cells)), "no cell of a correct notebook should hold an error"


@pytest.mark.slow
def test_demo_cell_is_replaced_and_not_run(graded):
    result = graded("normal")
    assert_graded(result)
    demo = result.notebook.cells[DEMO]
    assert demo.source == preprocessors.DEMO_STUB, f"the demo cell should be replaced by the stub: {demo.source!r}"
    assert not result.errors(DEMO), f"the demo cell raises if it runs, so it must not have: {demo.outputs}"


@pytest.mark.slow
def test_test_cell_judged_outside_is_not_run_and_says_so(graded):
    result = graded("normal")
    assert_graded(result)
    bonus = result.notebook.cells[BONUS]
    assert [o.get("text") for o in bonus.outputs] == [preprocessors.JUDGED_OUTSIDE], \
        f"the bonus test raises if it runs; it should hold only the line saying it was not run: {bonus.outputs}"
    assert "the bonus test ran" in bonus.source, "its source stays as handed out, for the feedback page"


@pytest.mark.slow
def test_os_exit_is_reported_in_its_cell(graded):
    result = graded("exits")
    evalue = kernel_death_in_answer(result)
    assert evalue.startswith("the kernel died while running this cell: ") and "exited with status 3" in evalue, \
        f"the message should name exit status 3: {evalue!r}"
    died = result.record["died"]
    assert died and died["label"] == "answer" and died["index"] == ANSWER and died["returncode"] == 3, \
        f"the record should name the answer cell and exit status 3: {result.record}"


@pytest.mark.slow
def test_segfault_is_reported_as_a_signal(graded):
    result = graded("segfault")
    evalue = kernel_death_in_answer(result)
    assert "segmentation fault (signal 11)" in evalue, f"the cause should be signal 11: {evalue!r}"
    assert result.record["died"]["returncode"] == -11, f"the record should hold returncode -11: {result.record}"


@pytest.mark.slow
def test_endless_loop_is_stopped_by_the_notebook_budget(graded):
    result = graded("loops")
    assert_graded(result)
    errors = result.errors(ANSWER)
    assert [e.ename for e in errors][-1:] == ["CellTimeoutError"], \
        f"the loop should be interrupted with nbgrader's CellTimeoutError: {errors}"
    assert_not_run_after(result, ANSWER, f"time limit of {NOTEBOOK_TIMEOUT} s was reached in cell answer")
    assert result.record["timed_out"] == {"index": ANSWER, "label": "answer", "limit": NOTEBOOK_TIMEOUT}, \
        f"the record should say the budget ran out in the answer cell: {result.record}"
    assert result.record["seconds"] >= NOTEBOOK_TIMEOUT, f"cells should have run for the whole budget: {result.record}"


@pytest.mark.slow
def test_sys_exit_leaves_the_kernel_running(graded, course):
    result = graded("sysexit")
    assert_graded(result)
    assert result.record["died"] is None and not result.record["not_run"], \
        f"sys.exit() in IPython must not stop the run: {result.record}"
    assert not result.errors(TEST), f"the test after sys.exit() should run and pass: {result.notebook.cells[TEST]}"
    score = gradebook_score(course, "sysexit", "t1")
    assert score == 1, f"the test cell's point should be in the gradebook, found {score}"


@pytest.mark.slow
def test_record_leaves_no_temporary_files(graded, course):
    graded("normal")
    leftovers = sorted(p.name for p in course.glob(".record-*"))
    assert not leftovers, f"temporary record files should be renamed into place, found {leftovers}"


def test_memory_a_failed_cell_held_is_freed_for_the_next(tmp_path):
    """A helper that allocates until MemoryError: IPython keeps its frames in the traceback, which the kit
    lets go of, so the next cell can allocate again; the student's names are left as they were."""
    limit = ("import resource\n"
             "data_kb = int(next(l for l in open('/proc/self/status') if l.startswith('VmData')).split()[1])\n"
             "limit = (data_kb << 10) + (512 << 20)\n"
             "resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))")
    fill = "def fill():\n    hoard = []\n    while True:\n        hoard.append(bytearray(64 << 20))\nfill()"
    after = "block = bytearray(384 << 20)\nprint(sorted(n for n in ('gc', 'shell', 'name') if n in globals()))"
    notebook = new_notebook(cells=[new_code_cell(limit), new_code_cell(fill), new_code_cell(after)],
                            metadata=source_notebook().metadata)
    executed, _ = GuardedExecute(timeout=CELL_TIMEOUT, record_file=str(tmp_path / "record.json")).preprocess(
        notebook, {})
    assert [o.get("ename") for o in executed.cells[1].outputs] == ["MemoryError"], \
        f"the helper should meet the limit: {executed.cells[1].outputs}"
    assert [o.get("text") for o in executed.cells[2].outputs] == ["[]\n"], \
        f"the next cell should allocate again and see no names of the kit's: {executed.cells[2].outputs}"
