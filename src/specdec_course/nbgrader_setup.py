"""The kit's side of nbgrader: the assignment's names and markers, the course directory's config, and running
nbgrader's commands. The preprocessors nbgrader loads from the config are in `preprocessors.py`.

    write_course_config(course, *autograde_config(600, 300), *feedback_config(autograder, course))
    released = generate_assignment(course, notebook_text)      # nbgrader generate_assignment

The solution and hidden-test markers are built at run time, so that this file, which students receive
with the package, never holds the text the release checks look for. Importing it needs no nbgrader.
"""

from __future__ import annotations

import os
import re
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


def generate_assignment(course: Path, source_text: str, timeout: int = 300) -> Path:
    """nbgrader generate_assignment on the notebook `source_text` in `course` (its config already written):
    the released notebook."""
    source = course / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    (source / NOTEBOOK).write_text(source_text)
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
                          cwd=course, env=nbgrader_env(), capture_output=True, text=True, timeout=timeout)
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    if done.returncode != 0 or not released.is_file():
        raise NbgraderError(f"nbgrader generate_assignment failed in {course}:\n{done.stdout}\n{done.stderr}")
    return released


def autograde_config(notebook_timeout: int, cell_timeout: int, judged_outside: list[str] = ()) -> list[str]:
    """Lines of nbgrader_config.py: nbgrader's default autograde preprocessors with the kit's swapped in.

    The defaults are read from the installed nbgrader and written out by name, so the config says exactly
    what runs. `notebook_timeout` bounds the whole notebook (0: no bound), `cell_timeout` each cell;
    the test cells `judged_outside` (grade_ids) are not run in the kernel.
    """
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    from .preprocessors import GuardedExecute, SkipDemoCells

    traits = Autograde.class_traits()
    sanitize = [_import_name(p) for p in traits["sanitize_preprocessors"].default()]
    sanitize.append(_import_name(SkipDemoCells))  # after OverwriteCells, which restores locked cells' source
    autograde = [_import_name(GuardedExecute if p is Execute else p)
                 for p in traits["autograde_preprocessors"].default()]
    return [*_list_setting("c.Autograde.sanitize_preprocessors", sanitize),
            *_list_setting("c.Autograde.autograde_preprocessors", autograde),
            f"c.GuardedExecute.notebook_timeout = {int(notebook_timeout)}",
            f"c.GuardedExecute.timeout = {int(cell_timeout)}",
            f"c.GuardedExecute.judged_outside = {list(judged_outside)!r}"]


def _import_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _list_setting(name: str, items: list[str]) -> list[str]:
    """`name = [...]` over several lines, one item a line, so the config file stays readable."""
    return [f"{name} = [", *(f"    {item!r}," for item in items), "]"]
