"""The course as nbgrader holds it: the assignment's names and markers, the course directory's config file, and
running nbgrader's commands. The lines of config that install the kit's preprocessors are written where those
live (`grading/preprocessors.py`, `grading/feedback.py`).

    write_course_config(course, *autograde_config(600, 300), *feedback_config(autograder, course))
    released = generate_assignment(course, notebook_text)      # nbgrader generate_assignment

The solution and hidden-test markers are built at run time, so that no file of the instructor package holds the
text the release's checks look for. Importing it needs no nbgrader.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

ASSIGNMENT = "speculative_decoding"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
# Built at run time so that this file, which students receive, never holds the markers it looks for.
_HIDDEN_PACKAGE = "autograder"
BEGIN_SOLUTION, END_SOLUTION = (f"### {edge} SOLUTION" for edge in ("BEGIN", "END"))
BEGIN_HIDDEN, END_HIDDEN = (f"### {edge} HIDDEN TESTS" for edge in ("BEGIN", "END"))
FORBIDDEN_TEXT = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN,
                  f"from {_HIDDEN_PACKAGE}", f"import {_HIDDEN_PACKAGE}")
# A hidden-test region, markers and indentation included; one left open runs to the end of the cell.
_HIDDEN_REGION = re.compile(rf"^[ \t]*{re.escape(BEGIN_HIDDEN)}.*?(?:{re.escape(END_HIDDEN)}[ \t]*\n?|\Z)", re.S | re.M)


def remove_hidden_tests(source: str) -> str:
    """`source` without its hidden-test regions."""
    return _HIDDEN_REGION.sub("", source)


def blank_hidden_tests(source: str) -> str:
    """`source` with its hidden-test regions blanked, line numbers kept."""
    return _HIDDEN_REGION.sub(lambda region: "\n" * region.group().count("\n"), source)


class NbgraderError(subprocess.SubprocessError):
    """An nbgrader command failed; the message holds its output."""


def nbgrader_env() -> dict:
    """nbgrader runs alembic as a subprocess: the environment's bin directory must be on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def write_course_config(course: Path, *settings: str) -> None:
    """The course directory's nbgrader_config.py: the course id, then `settings` (lines of config)."""
    lines = ["c = get_config()", "c.CourseDirectory.course_id = 'specdec'", *settings]
    (course / "nbgrader_config.py").write_text("\n".join(lines) + "\n")


def generate_assignment(course: Path, source_text: str, cpu_seconds: int = 300) -> Path:
    """nbgrader generate_assignment on the notebook `source_text` in `course` (its config already written):
    the released notebook. It may use `cpu_seconds` of CPU in each of its processes (the kernel's RLIMIT_CPU) and
    WALL_FACTOR times that on the clock, which a loaded machine stretches."""
    from specdec_kit.checks.core import WALL_FACTOR  # here: the checks import torch, which this module needs not

    source = course / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    (source / NOTEBOOK).write_text(source_text)
    process = subprocess.Popen([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                               cwd=course, env=nbgrader_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    with contextlib.suppress(ProcessLookupError):  # its children (alembic) inherit the limit
        resource.prlimit(process.pid, resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    try:
        stdout, stderr = process.communicate(timeout=cpu_seconds * WALL_FACTOR)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        stderr += f"\n(stopped after {cpu_seconds * WALL_FACTOR} s on the clock)"
    if process.returncode == -signal.SIGXCPU:
        stderr += f"\n(stopped after {cpu_seconds} s of CPU)"
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    if process.returncode != 0 or not released.is_file():
        raise NbgraderError(f"nbgrader generate_assignment failed in {course}:\n{stdout}\n{stderr}")
    return released


def import_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def list_setting(name: str, items: list[str]) -> list[str]:
    """`name = [...]` over several lines, one item a line, so the config file stays readable."""
    return [f"{name} = [", *(f"    {item!r}," for item in items), "]"]
