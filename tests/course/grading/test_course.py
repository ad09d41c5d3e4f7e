"""The batch's set-up (`specdec_course.grading.course`): a sandboxed batch as root refuses to grade with no cgroup
while `[limits] require_cgroups` holds, and says what to do; a platform's one-submission container is waived.
The rest of the set-up is graded end to end in test_batch.py.

Example run: python -m pytest tests/course/grading/test_course.py -q
"""

import os
import shutil
from pathlib import Path

import pytest

from specdec_course.grading import course
from specdec_course.sandbox import box, processes

from conftest import REPO, SOLUTION


class SetUp(Exception):
    """Raised where the course would be set up: the checks before it passed."""


def set_up(*args) -> None:
    raise SetUp


@pytest.fixture
def no_cgroup(monkeypatch):
    """A root grader with bubblewrap and no cgroup it may write (a container's read-only /sys/fs/cgroup)."""
    monkeypatch.setattr(box, "_detected", lambda: ("bwrap", ""))
    monkeypatch.setattr(processes, "cgroup_support", lambda: ("", "cgroup v2: /sys/fs/cgroup is read-only"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(course, "prepare_course", set_up)


def autograder(tmp_path: Path, value: str) -> Path:
    """A copy of the course's autograder folder whose [limits] require_cgroups is `value`."""
    folder = tmp_path / "autograder"
    shutil.copytree(REPO / "autograder", folder)
    config = folder / "config.toml"
    assert "\nrequire_cgroups = true\n" in config.read_text(), "the course's config requires cgroups"
    config.write_text(config.read_text().replace("\nrequire_cgroups = true\n", f"\nrequire_cgroups = {value}\n"))
    return folder


def test_no_cgroup_is_refused_saying_what_to_do(no_cgroup, tmp_path):
    with pytest.raises(box.SandboxError) as refused:
        course.setup_batch(tmp_path / "course", SOLUTION, REPO / "autograder")
    message = str(refused.value)
    for words in ("read-only", "as root on a host whose cgroups", "systemd-run --scope -p Delegate=yes",
                  "require_cgroups = false"):
        assert words in message, f"the refusal says why and what to do ({words!r}): {message}"
    assert not (tmp_path / "course").exists(), "nothing is set up before the refusal"


def test_grading_without_cgroups_when_the_course_allows_it_or_one_per_container(no_cgroup, tmp_path):
    with pytest.raises(SetUp):
        course.setup_batch(tmp_path / "course", SOLUTION, autograder(tmp_path, "false"))
    with pytest.raises(SetUp):
        course.setup_batch(tmp_path / "course", SOLUTION, REPO / "autograder", one_per_container=True)
    with pytest.raises(SetUp):
        course.setup_batch(tmp_path / "course", SOLUTION, REPO / "autograder", sandboxed=False)


def test_require_cgroups_must_be_a_boolean(no_cgroup, tmp_path):
    with pytest.raises(ValueError, match="require_cgroups must be true or false"):
        course.setup_batch(tmp_path / "course", SOLUTION, autograder(tmp_path, '"yes"'))
