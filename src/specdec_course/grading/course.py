"""The course's set-up for a batch, before any submission is graded: nbgrader's course directory made from the
student release (so it holds no hidden test or solution), the zoo's pairs built, and the batch's `BatchSetup`:
the grading plan, the course's points and the machine's share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_kit import zoo
from specdec_kit.checks.speed import SPEED_TEST
from specdec_kit.protocol.adapters import is_graded_cell

from ..authoring.points import extra_credit
from ..authoring.release import render_release
from ..core import config as course_config
from ..core.nbgrader_course import ASSIGNMENT, NOTEBOOK, NbgraderError, generate_assignment, write_course_config
from ..core.plan import Plan, load_plan
from ..sandbox import box, processes
from ..sandbox.models import CHECK_PAIRS
from . import feedback
from .archives import ArchiveLimits
from .preprocessors import autograde_config

GRADING_PAIRS = (*CHECK_PAIRS, "synthetic-small")  # the pairs grading loads on a CPU: the checks', the timing pair


class GradingSetupError(NbgraderError):
    """The course directory could not be set up: nothing can be graded, so stop before the first student."""


@dataclass
class BatchSetup:
    """How a batch is graded: the plan (checks, limits), the course's points and the machine's share."""

    plan: Plan
    autograder_dir: Path
    points: dict[str, float]  # auto-graded test cells (grade_id -> points), in notebook order
    extra_credit: dict[str, float]  # bonus test cells (grade_id -> extra credit when passed); 0 in `points`
    release: nbformat.NotebookNode  # the notebook students were given: where a submission's cells come from
    notebook_seconds: int
    cell_seconds: int
    jobs: int = 1
    isolation: str = "none"  # one of box.ISOLATIONS: how every submission's code runs
    limits_held: str = "none"  # what holds its limits, in words (box.limits_label): the rows' `isolation` column
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))

    @property
    def threads(self) -> int:
        """Torch threads of each process a job runs at once (its kernel and its verdict child)."""
        return max(1, self.cores // (2 * self.jobs))

    @property
    def timing_threads(self) -> int:
        """Torch threads of the speed test's children, which run while nothing else of their job does."""
        return max(1, self.cores // self.jobs)


def setup_batch(course: Path, solution: Path, autograder_dir: Path, jobs: int = 1,
                notebook_seconds: int | None = None, sandboxed: bool = True,
                one_per_container: bool = False) -> BatchSetup:
    """Check the options, set up the course and the zoo, and return the batch's setup.

    The limits are those of autograder/config.toml; `notebook_seconds` (`--timeout`) overrides its own. With
    `sandboxed`, every submission runs in the strongest sandbox the machine gives (`box.detect`), and a
    machine that gives none is refused, as is one where the sandboxes get no cgroup while `require_cgroups` holds
    (`one_per_container`, a platform's container that grades one submission and is discarded, waives it); without
    (`--no-sandbox`), as the grader's own user.
    """
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    if not (autograder_dir / "hidden.py").is_file():
        raise ValueError(f"{autograder_dir} holds no hidden.py: pass --autograder with the instructors' folder")
    config = course_config.load_config(autograder_dir)
    limits = config.limits
    seconds = limits.notebook_seconds if notebook_seconds is None else notebook_seconds
    if seconds <= 0:
        raise ValueError(f"the notebook time limit must be a positive number of seconds, got {seconds}")
    isolation = box.detect() if sandboxed else "none"  # after the options: a bad option is named first
    if sandboxed and isolation == "none":
        raise box.SandboxError(f"no sandbox for the students' code: {box.why_not()}; or pass --no-sandbox "
                               "to grade without one (every row then says so)")
    cgroup = _cgroup(isolation, limits.require_cgroups and not one_per_container, autograder_dir)
    cell_seconds = min(seconds, limits.cell_seconds)
    prepare_course(course, solution, autograder_dir, seconds, cell_seconds, config)
    prepare_zoo()
    plan = load_plan(autograder_dir, config)
    points = {name: p for name, p in course_points(course).items() if name in plan.tests}
    extra_credit = {name: p for name, p in course_extra_credit(course).items() if name in plan.tests}
    release = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    if isolation == "user":  # no namespaces: the sandboxes' users see the machine's files as any other user does
        box.hide([autograder_dir, solution.parent, course.parent])
    return BatchSetup(plan, autograder_dir, points, extra_credit, release, seconds, cell_seconds, jobs, isolation,
                      box.limits_label(isolation, cgroup))


def _cgroup(isolation: str, required: bool, autograder_dir: Path) -> str:
    """The sandboxes' cgroup version ("" for none); a SandboxError where one is required and none can be made (as
    root, with a sandbox: elsewhere no cgroup was ever possible, and the row says so)."""
    if isolation == "none" or os.geteuid() != 0:
        return ""
    version, why = processes.cgroup_support()
    if required and not version:
        raise box.SandboxError(
            f"no cgroup for the sandboxes' memory, process and freezer limits ({why}), and [limits] require_cgroups "
            "is true: grade as root on a host whose cgroups the grader may write, or on a systemd machine under "
            "`systemd-run --scope -p Delegate=yes specdec-course autograde ...`, or set require_cgroups = false in "
            f"{autograder_dir / 'config.toml'} to grade with per-process limits only (every row then says so)")
    return version


def archive_limits(autograder_dir: Path) -> ArchiveLimits:
    """How far a class's zip or tar may expand: [limits] archive_mb and archive_files of config.toml."""
    limits = course_config.load_config(autograder_dir).limits
    return ArchiveLimits(limits.archive_mb, limits.archive_files)


def prepare_course(course: Path, solution: Path, autograder_dir: Path, notebook_seconds: int = 600,
                   cell_seconds: int = 300, config: course_config.CourseConfig | None = None) -> None:
    """Set up the course directory and its gradebook once, before any submission is graded.

    The assignment is generated from the student release, so nothing in the course holds a hidden test or
    a solution; the config swaps in the kit's nbgrader preprocessors (time limits, demo cells, clean
    feedback)."""
    course.mkdir(parents=True, exist_ok=True)
    try:
        release = render_release(solution, config or course_config.load_config(autograder_dir))
        # Not run in the kernel: the bonus cells (0 nbgrader points) and the speed test, which the grader times alone
        # (a timing in the kernel, beside the batch's other jobs, would measure them and decide nothing).
        outside = [*extra_credit(nbformat.reads(release, as_version=4)), SPEED_TEST]
        write_course_config(course, *autograde_config(notebook_seconds, cell_seconds, judged_outside=outside),
                            # A deleted locked test cell is restored from the source, never scored 0 unseen.
                            "c.OverwriteCells.add_missing_cells = True",
                            *feedback.feedback_config(autograder_dir.resolve(), course.resolve()))
        generate_assignment(course, release)
    except NbgraderError as e:
        raise GradingSetupError(str(e)) from e


def prepare_zoo() -> None:
    """Build the zoo pairs grading loads before any job starts, so parallel jobs never wait on it, readable by the
    sandboxes' users (a pair's folders are built private), except their weights: those only a notebook's kernel reads
    (its visible tests run them); the verdict's models, the timing pair's too, run in the grading process
    (`models.py`)."""
    for pair in GRADING_PAIRS:
        target, _ = zoo.materialize(pair)
        for path in [target.parent, *target.parent.rglob("*")]:
            path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o644))
        if os.geteuid() == 0:
            box.restrict_weights([target.parent])


def course_points(course: Path) -> dict[str, float]:
    """Points of every graded cell, by grade_id, in notebook order (from the course's source notebook)."""
    notebook = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in notebook.cells if is_graded_cell(c)}


def course_extra_credit(course: Path) -> dict[str, float]:
    """Extra credit of every bonus test cell, by grade_id: the cell's `specdec.extra_credit` metadata. Its nbgrader
    points are 0, so the assignment's maximum stays what the required parts give."""
    return extra_credit(nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4))


def hand_graded_cells(course: Path) -> list[str]:
    """The cells a person grades: nbgrader's graded answer cells (the report), by grade_id."""
    notebook = nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in notebook.cells if feedback.is_hand_graded(c)]


def graded_cells(course: Path) -> list[str]:
    """The graded cells of the assignment, in notebook order."""
    return list(course_points(course))
