"""environment.yml's exact pins satisfy pyproject.toml's ranges, so conda users and pip users agree; the install
script applies those pins, read by the function that writes the students' constraints.txt. The Python the
repository claims (README, requires-python) is the one environment.yml pins, which CI and the grading image run:
the least version claimed is the one tested. The student distribution's claim is the same in its pyproject.toml and
in the README students receive.

Example run: python -m pytest tests/kit/test_environment.py -q
"""

import re
import subprocess
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
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
            continue  # a requirement of another Python than the environment's
        name = requirement.name.lower()
        assert name in pins, f"environment.yml pins no version of {name}, which pyproject.toml requires"
        assert Version(pins[name]) in requirement.specifier, (
            f"environment.yml pins {name}=={pins[name]}, outside pyproject.toml's range {requirement.specifier}"
        )


def least_python(pyproject: str = "pyproject.toml") -> str:
    """The least Python `pyproject`'s requires-python allows, from its `>=` bound."""
    requires = tomllib.loads((REPO / pyproject).read_text())["project"]["requires-python"]
    [least] = [spec.version for spec in SpecifierSet(requires) if spec.operator == ">="]
    return least


def test_python_pin_is_supported():
    python = environment_python()
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version(python) in SpecifierSet(requires), (
        f"environment.yml pins Python {python}, outside pyproject.toml's requires-python {requires}"
    )


def test_the_python_claimed_is_the_python_tested():
    """CI and `make` install environment.yml's Python, the grading image its own: the least version claimed."""
    readme = re.findall(r"Python (\d+\.\d+)\+", (REPO / "README.md").read_text())
    image = re.findall(r"^FROM python:(\d+\.\d+)", (REPO / "packaging" / "Dockerfile").read_text(), re.M)
    tested = environment_python()
    assert (readme, least_python(), image) == ([tested], tested, [tested]), (
        f"environment.yml tests Python {tested}: the README's claim {readme}, pyproject.toml's least requires-python "
        f"{least_python()} and the grading image's {image} should all be it (test another Python before claiming it)"
    )


def test_no_requirement_is_for_a_python_outside_the_claim():
    dead = [str(r) for r in project_requirements()
            if r.marker and not r.marker.evaluate({"python_version": least_python()})
            and not r.marker.evaluate({"python_version": environment_python()})]
    assert not dead, f"pyproject.toml requires these for a Python its requires-python excludes: {dead}"


def test_student_distribution_claims_one_python():
    from specdec_course.authoring.release import student_readme
    from specdec_course.core.config import load_config

    claimed = re.findall(r"Python (\d+\.\d+) or newer", student_readme(load_config(REPO / "autograder")))
    least = least_python("packaging/student/pyproject.toml")
    assert claimed == [least], (
        f"the student README claims Python {claimed}, its pyproject.toml (packaging/student) requires {least}"
    )


def test_torch_is_pinned_in_environment_yml_alone():
    """Every install takes torch's version from environment.yml's pins (pins.txt, the students' constraints.txt): a
    new torch is one edit."""
    places = [REPO / "packaging" / "install.sh", REPO / "Makefile", REPO / ".ci" / "run", REPO / "packaging" /
              "Dockerfile", *REPO.glob("src/**/*.py"), *REPO.glob("tests/**/*.py")]
    named = [str(path.relative_to(REPO)) for path in places if re.search(r"torch==\d", path.read_text())]
    assert not named, f"these name torch's version, which environment.yml alone pins: {named}"


def test_install_script_constrains_pip_with_the_environment_pins(tmp_path):
    script = (REPO / "packaging" / "install.sh").read_text()
    [writes] = [line for line in script.splitlines() if "specdec_course.core.pins" in line]
    assert '-c "$venv/pins.txt"' in script, "install.sh should pass the pins it writes to pip as constraints"
    subprocess.run(["bash", "-c", f"set -euo pipefail; root={REPO}; venv={tmp_path}; {writes}"], check=True)
    assert (tmp_path / "pins.txt").read_text() == constraints(REPO / "environment.yml"), (
        "install.sh's pins.txt should be specdec_course.core.pins.constraints of environment.yml, as students' "
        "constraints.txt is"
    )
