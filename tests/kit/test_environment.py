"""environment.yml's exact pins satisfy pyproject.toml's ranges, so conda users and pip users agree; the install
script applies those pins, read by the function that writes the students' constraints.txt."""

import re
import subprocess

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from specdec_course.core.pins import constraints, environment_pins

from conftest import REPO


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["dev"] + extras["notebook"] + extras["instructor"]]


def environment_python() -> str:
    return re.search(r"python=(\d+\.\d+)", (REPO / "environment.yml").read_text()).group(1)


def test_every_requirement_is_pinned_within_its_range():
    pins = environment_pins(REPO / "environment.yml")
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


def test_install_script_constrains_pip_with_the_environment_pins(tmp_path):
    script = (REPO / "packaging" / "install.sh").read_text()
    [writes] = [line for line in script.splitlines() if "specdec_course.core.pins" in line]
    assert '-c "$venv/pins.txt"' in script, "install.sh should pass the pins it writes to pip as constraints"
    subprocess.run(["bash", "-c", f"set -euo pipefail; root={REPO}; venv={tmp_path}; {writes}"], check=True)
    assert (tmp_path / "pins.txt").read_text() == constraints(REPO / "environment.yml"), (
        "install.sh's pins.txt should be specdec_course.core.pins.constraints of environment.yml, as students' "
        "constraints.txt is"
    )
