"""environment.yml's exact pins satisfy pyproject.toml's ranges, so conda users and pip users agree."""

import re

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import REPO

PIN = re.compile(r"^\s*-\s*([A-Za-z0-9_.-]+)==(\S+)\s*$")


def environment_pins() -> dict[str, str]:
    lines = (REPO / "environment.yml").read_text().splitlines()
    return {m.group(1).lower(): m.group(2) for m in map(PIN.match, lines) if m}


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["dev"] + extras["notebook"] + extras["instructor"]]


def environment_python() -> str:
    return re.search(r"python=(\d+\.\d+)", (REPO / "environment.yml").read_text()).group(1)


def test_every_requirement_is_pinned_within_its_range():
    pins = environment_pins()
    for requirement in project_requirements():
        if requirement.marker and not requirement.marker.evaluate({"python_version": environment_python()}):
            continue  # e.g. tomli, needed only below the environment's Python
        name = requirement.name.lower()
        assert name in pins, f"environment.yml pins no version of {name}, which pyproject.toml requires"
        assert Version(pins[name]) in requirement.specifier, (
            f"environment.yml pins {name}=={pins[name]}, outside pyproject.toml's range {requirement.specifier}"
        )


def test_python_pin_is_supported():
    python = environment_python()
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    from packaging.specifiers import SpecifierSet

    assert Version(python) in SpecifierSet(requires), (
        f"environment.yml pins Python {python}, outside pyproject.toml's requires-python {requires}"
    )
