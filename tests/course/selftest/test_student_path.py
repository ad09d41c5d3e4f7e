"""The student README's local path, as written: a fresh venv, its commands, the notebook executed headless; and
its `specdec-kit` commands, run from the tree's root on a finished notebook there.

Example run: python -m pytest tests/course/selftest/test_student_path.py -q -m slow
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from specdec_course.authoring import release
from specdec_course.core import pins
from specdec_course.selftest.student_run import finished_notebook

from conftest import REPO, SOLUTION

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
    setup, cpu_torch, headless, kit = readme_commands(release.student_readme())
    torch, constraints = pins.environment_pins(REPO / "environment.yml")["torch"], pins.CONSTRAINTS_NAME
    assert setup == ["python3 -m venv .venv && . .venv/bin/activate", f"pip install -c {constraints} torch=={torch}",
                     f'pip install -c {constraints} -e ".[notebook]"', f"jupyter lab {release.NOTEBOOK}"], (
        f"the README's set-up commands changed: {setup}"
    )
    assert cpu_torch == [f"pip install -c {constraints} torch=={torch} --extra-index-url {release.CPU_INDEX}"], (
        f"the README's CPU-only torch command changed: {cpu_torch}"
    )
    assert len(headless) == 1 and "nbconvert" in headless[0] and "--KernelManager.transport=ipc" in headless[0], (
        f"the README's headless run changed: {headless}"
    )
    assert kit == [command for command, _ in release.KIT_COMMANDS], f"the README's specdec-kit commands: {kit}"
    assert sorted(command.split()[1] for command in kit) == ["bench", "demo", "rounds", "zoo"], "each subcommand once"


@pytest.mark.slow  # a fresh venv: pip installs torch, transformers and JupyterLab (about two minutes)
@pytest.mark.release
def test_readme_local_path_works_on_a_fresh_venv(tmp_path):
    tree = release.export_student_tree(REPO, RELEASE, tmp_path / "student", release.student_readme())
    (setup_venv, _, install, open_lab), (install_torch,), (headless,), _ = readme_commands(
        (tree / "README.md").read_text())
    # Linux without an NVIDIA GPU: the README's CPU-only torch line. `jupyter lab` would wait for a browser: its
    # --version proves it is installed.
    installs = [command.replace("pip install", "pip install -q") for command in (install_torch, install)]
    script = "\n".join(["set -euxo pipefail", setup_venv, *installs, "pip check",
                        open_lab.split()[0] + " lab --version", headless])
    run = subprocess.run(["bash", "-c", script], cwd=tree, env=student_env(), capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, f"the README's commands failed (rc {run.returncode}):\n{run.stderr[-3000:]}"
    assert "+cpu" in subprocess.run([".venv/bin/python", "-c", "import torch; print(torch.__version__)"], cwd=tree,
                                    capture_output=True, text=True).stdout, "the CPU-only build of torch"
    assert "without encryption" not in run.stderr, "the headless run's kernel talks over local sockets, unwarned"

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


@pytest.mark.slow  # each command decodes on the offline models (about two minutes on 2 cores)
@pytest.mark.release
def test_kit_commands_run_from_the_tree_root_as_the_readme_gives_them(tmp_path):
    """A finished notebook at the root, as a student's would be: every specdec-kit command of the README runs there
    with its defaults, finding the notebook by itself."""
    tree = release.export_student_tree(REPO, RELEASE, tmp_path / "student", release.student_readme())
    nbformat.write(finished_notebook(SOLUTION), tree / release.NOTEBOOK)
    *_, kit = readme_commands((tree / "README.md").read_text())
    bin_dir = Path(sys.executable).parent  # this environment's specdec-kit, as the README's install gives one
    for command in kit:
        words = shlex.split(command)
        run = subprocess.run([str(bin_dir / words[0]), *words[1:]], cwd=tree, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, f"`{command}` failed from the tree's root (rc {run.returncode}):\n" \
                                    f"{run.stderr[-2000:]}"
    assert (tree / "out" / "rounds.html").is_file() and (tree / "out" / "bench" / "bench.png").is_file(), \
        sorted(p.relative_to(tree).as_posix() for p in (tree / "out").rglob("*"))
