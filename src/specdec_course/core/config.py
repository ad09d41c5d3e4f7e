"""The course's settings, read and checked once from the instructor's `autograder/config.toml`: every reader (the
grading plan, a batch's set-up, `release`, `export`, `merge`) takes this object, none parses the file itself.

    config = load_config(Path("autograder"))   # [publish] student_repo, tag; [deadline] due, grace_minutes
    config.min_ratio, config.limits            # [speedup] min_ratio; [limits] check_seconds, memory_mb, ...
    install_spec(config)                       # what the notebook's set-up cell passes to pip
    constraints_url(config)                    # the constraints.txt it reads the course's versions from
    placeholder_problems(config)               # [] once the instructor has set the student repository

`specdec-course release` writes the student repository and tag into the notebook's set-up cell and the
student README, and refuses `--student-repo` while `placeholder_problems` finds any.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path

from . import pins

CONFIG_NAME = "config.toml"
PLACEHOLDER_OWNER = "your-course"  # the owner the shipped config.toml names
_GITHUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")  # owner/name


@dataclass(frozen=True)
class Deadline:
    """The [deadline] section: when submissions are due, and how many minutes late still count as on time."""

    due: datetime  # timezone-aware
    grace_minutes: int


@dataclass(frozen=True)
class Limits:
    """The [limits] section: per submission, in its own time (config.toml's comments say what each counts)."""

    notebook_seconds: int  # the notebook's own run, whole
    cell_seconds: int  # any one of its cells
    check_seconds: float  # any one check of the verdict
    verdict_seconds: float  # all checks of one notebook together
    memory_mb: int  # each grading process
    scratch_mb: int  # what each sandbox may write
    scratch_files: int
    require_cgroups: bool  # refuse to grade, sandboxed as root, without a cgroup
    archive_mb: int  # how far a class's zip or tar may expand
    archive_files: int


@dataclass(frozen=True)
class CourseConfig:
    """Every section of `path`."""

    path: Path  # named in every error about a value
    student_repo: str  # GitHub owner/name the student tree is published to
    tag: str  # the tag of the student repository that students install the support package at
    deadline: Deadline
    min_ratio: float  # [speedup]: test_speedup's bar, the cached decoder's speed over HF assisted generation's
    limits: Limits


def load_config(autograder_dir: Path = Path("autograder")) -> CourseConfig:
    """Read and check `autograder_dir/config.toml`; a missing or mistyped value raises ValueError naming it."""
    import tomllib
    path = autograder_dir / CONFIG_NAME
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path} is not valid TOML: {e}") from None
    publish, deadline = _section(data, "publish", path), _section(data, "deadline", path)
    speedup, limits = _section(data, "speedup", path), _section(data, "limits", path)
    return CourseConfig(path, _string(publish, "publish", "student_repo", path),
                        _string(publish, "publish", "tag", path),
                        Deadline(_due(deadline.get("due"), path), _grace_minutes(deadline.get("grace_minutes"), path)),
                        _positive(speedup, "speedup", "min_ratio", float, path), _limits(limits, path))


def install_spec(config: CourseConfig) -> str:
    """What the set-up cell passes to pip."""
    return f"specdec-kit @ git+https://github.com/{config.student_repo}@{config.tag}"


def constraints_url(config: CourseConfig) -> str:
    """The published tree's constraints.txt at the tag, as the set-up cell downloads it."""
    return f"https://raw.githubusercontent.com/{config.student_repo}/{config.tag}/{pins.CONSTRAINTS_NAME}"


def colab_url(config: CourseConfig, notebook: str) -> str:
    return f"https://colab.research.google.com/github/{config.student_repo}/blob/{config.tag}/{notebook}"


def placeholder_problems(config: CourseConfig) -> list[str]:
    """The [publish] values still to set before students can install from the student repository."""
    problems = []
    if not _GITHUB_REPO.fullmatch(config.student_repo):
        problems.append(f"[publish] student_repo = {config.student_repo!r} is not a GitHub owner/name")
    elif config.student_repo.split("/")[0] == PLACEHOLDER_OWNER:
        problems.append(f"[publish] student_repo = {config.student_repo!r} is the placeholder: set your course's "
                        "GitHub owner/name")
    if not config.tag.strip():
        problems.append("[publish] tag is empty: set the tag students install at (e.g. 'v1.0.0')")
    return problems


def _section(data: dict, name: str, path: Path) -> dict:
    section = data.get(name)
    if not isinstance(section, dict):
        raise ValueError(f"{path} has no [{name}] section")
    return section


def _limits(section: dict, path: Path) -> Limits:
    values = {}
    for field in fields(Limits):
        if field.type == "bool":
            value = section.get(field.name)
            if not isinstance(value, bool):
                raise ValueError(f"{path}: [limits] {field.name} must be true or false, got {value!r}")
            values[field.name] = value
        else:
            values[field.name] = _positive(section, "limits", field.name, int if field.type == "int" else float, path)
    return Limits(**values)


def _positive(section: dict, name: str, key: str, kind: type, path: Path) -> float:
    """`section[key]`, a positive number (a whole one where `kind` is int)."""
    value = section.get(key)
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not (whole or (kind is float and isinstance(value, float))) or value <= 0:
        what = "a whole number above 0" if kind is int else "a number above 0"
        raise ValueError(f"{path}: [{name}] {key} must be {what}, got {value!r}")
    return kind(value)


def _string(section: dict, name: str, key: str, path: Path) -> str:
    value = section.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{path}: [{name}] {key} must be a string, got {value!r}")
    return value


def _due(value: object, path: Path) -> datetime:
    """A TOML offset date-time or an ISO 8601 string, with its timezone."""
    if isinstance(value, str):
        try:  # Python 3.10's fromisoformat does not read a trailing Z
            value = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
        except ValueError:
            pass
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{path}: [deadline] due must be an ISO 8601 date and time with its timezone, such as "
                         f"'2026-12-05T23:59:00-08:00', got {value!r}")
    return value


def _grace_minutes(value: object, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{path}: [deadline] grace_minutes must be a whole number of minutes, 0 or more, "
                         f"got {value!r}")
    return value
