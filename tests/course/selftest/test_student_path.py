"""The student README's local path, as written: a fresh venv, its commands, the notebook executed headless."""

import json
import os
import re
import subprocess

import nbformat
import pytest

from specdec_course.authoring import release
from specdec_course.core import pins

from conftest import REPO

RELEASE = REPO / "assignment" / release.NOTEBOOK


def readme_commands(readme: str) -> list[list[str]]:
    """The README's shell blocks, each a list of commands with their comments removed."""
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    return [[line.split("  #")[0].strip() for line in block.splitlines() if line.strip()] for block in blocks]


def student_env() -> dict:
    """This environment without the kit's own venv: the README starts from a bare `python3`."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO)))
    return env


def test_readme_commands_are_the_ones_this_test_runs():
    setup, headless = readme_commands(release.student_readme())
    torch = pins.environment_pins(REPO / "environment.yml")["torch"]
    assert setup == ["python3 -m venv .venv && . .venv/bin/activate", f"pip install torch=={torch}",
                     f'pip install -c {pins.CONSTRAINTS_NAME} -e ".[notebook]"', f"jupyter lab {release.NOTEBOOK}"], (
        f"the README's set-up commands changed: {setup}"
    )
    assert len(headless) == 1 and "nbconvert" in headless[0], f"the README's headless run changed: {headless}"


@pytest.mark.slow  # a fresh venv: pip installs torch, transformers and JupyterLab (about two minutes)
@pytest.mark.install
def test_readme_local_path_works_on_a_fresh_venv(tmp_path):
    tree = release.export_student_tree(REPO, RELEASE, tmp_path / "student", release.student_readme())
    (setup_venv, install_torch, install, open_lab), (headless,) = readme_commands((tree / "README.md").read_text())
    # The torch command as written: this machine's pip finds PyTorch's CPU build under the pin. `jupyter lab`
    # would wait for a browser: its --version proves it is installed.
    installs = [command.replace("pip install", "pip install -q") for command in (install_torch, install)]
    script = "\n".join(["set -euxo pipefail", setup_venv, *installs, open_lab.split()[0] + " lab --version", headless])
    run = subprocess.run(["bash", "-c", script], cwd=tree, env=student_env(), capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, f"the README's commands failed (rc {run.returncode}):\n{run.stderr[-3000:]}"

    executed = nbformat.read(tree / "run.ipynb", as_version=4)
    outputs = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.outputs for cell in executed.cells
               if cell.cell_type == "code"}
    printed = "".join(o.get("text", "") for o in outputs["imports"])
    assert "device cpu, pair " in printed and not any(o.output_type == "error" for o in outputs["imports"]), (
        f"the imports cell should run and name the offline pair, got {json.dumps(outputs['imports'])[:800]}"
    )
    tests = [name for name in outputs if name and name.startswith("test_")]
    errors = {name: [o.ename for o in outputs[name] if o.output_type == "error"] for name in tests}
    assert len(tests) == 13 and all(found == ["NotImplementedError"] for found in errors.values()), (
        f"every test cell of the blank notebook should stop at the student's first NotImplementedError, got {errors}"
    )
