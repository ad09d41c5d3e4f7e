"""The course's settings (`specdec_course.core.config`): autograder/config.toml read and checked in one place, and what
the grading plan and the notebook's visible speed test take from it."""

import dataclasses
import shutil

import pytest

from specdec_course.core.config import Limits, load_config
from specdec_course.core.plan import load_plan
from specdec_kit import checks

from conftest import REPO

SHIPPED = (REPO / "autograder" / "config.toml").read_text()


def config_with(tmp_path, old: str, new: str):
    """A copy of the shipped config.toml with `old` (one line's text) replaced by `new`; its folder."""
    assert SHIPPED.count(old) == 1, f"the shipped config.toml holds {old!r} once"
    (tmp_path / "config.toml").write_text(SHIPPED.replace(old, new))
    return tmp_path


def test_the_shipped_config_reads_whole():
    config = load_config(REPO / "autograder")
    assert config.min_ratio == 0.75 and config.limits.check_seconds == 60 and config.limits.require_cgroups, config


def test_the_shipped_grading_bar_is_the_notebooks():
    """The course ships one speed bar: the release's visible test (checks.SPEEDUP_MIN_RATIO) asks what grading asks,
    as config.toml's comment says; an instructor who moves one moves the other."""
    shipped = load_config(REPO / "autograder").min_ratio
    assert shipped == checks.SPEEDUP_MIN_RATIO, (
        f"autograder/config.toml's [speedup] min_ratio {shipped} and checks.SPEEDUP_MIN_RATIO "
        f"{checks.SPEEDUP_MIN_RATIO}, the notebook's bar, differ: set them alike")


def test_the_plan_takes_its_bar_and_limits_from_the_config(tmp_path):
    shutil.copytree(REPO / "autograder", tmp_path / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    folder = config_with(tmp_path / "autograder", "check_seconds = 60 ", "check_seconds = 7.5 ")
    (folder / "config.toml").write_text((folder / "config.toml").read_text().replace("min_ratio = 0.75",
                                                                                     "min_ratio = 0.5"))
    plan = load_plan(folder)
    assert (plan.check_seconds, plan.min_ratio, plan.memory_mb) == (7.5, 0.5, load_config(folder).limits.memory_mb)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Limits)])
@pytest.mark.parametrize("value", ["0", "-3", '"60"', "true", "[]"])
def test_a_limit_that_is_no_positive_number_is_named(tmp_path, field, value):
    line = next(line for line in SHIPPED.splitlines() if line.startswith(f"{field} ="))
    if value == "true" and field == "require_cgroups":
        value = "1"
    folder = config_with(tmp_path, line + "\n", f"{field} = {value}\n")
    with pytest.raises(ValueError, match=rf"config\.toml: \[limits\] {field} must be "):
        load_config(folder)


def test_a_whole_number_limit_refuses_a_fraction(tmp_path):
    folder = config_with(tmp_path, "memory_mb = 4096", "memory_mb = 4096.5")
    with pytest.raises(ValueError, match=r"\[limits\] memory_mb must be a whole number above 0, got 4096.5"):
        load_config(folder)


def test_a_missing_section_is_named(tmp_path):
    folder = config_with(tmp_path, "[speedup]", "[speed]")
    with pytest.raises(ValueError, match=r"has no \[speedup\] section"):
        load_config(folder)
