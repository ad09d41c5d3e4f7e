"""`specdec-kit release`: the student notebook, cut from the solution by nbgrader.

    specdec-kit release                      # solutions/ -> assignment/speculative_decoding.ipynb
    specdec-kit release --check              # exit 1 if assignment/ differs from a fresh release
    specdec-kit release --student-repo DIR   # also export the tree the course publishes to students

nbgrader's generate_assignment runs in a throw-away course directory; its output is written with
the notebook's cell ids kept and jupytext's pairing metadata dropped, so two releases are identical
byte for byte. The student tree holds the release notebook, the support package, data/ and a student
README; never solutions/, autograder/ or tests/, which `check_student_tree` verifies.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat

from . import publish
from .nbgrader import FORBIDDEN_TEXT, NOTEBOOK, NbgraderError, generate_assignment, write_course_config

STUDENT_TREE = ("src", "data", "pyproject.toml")
# Seconds of a whole run on 2 idle cores (first run on a machine, later runs), from `specdec-kit time-notebook
# [--finished] [--fresh-cache]`; the student README states them.
RUN_SECONDS = {"blank": (12, 6), "finished": (94, 59)}
INSTALL_TOKEN = "{{KIT_INSTALL}}"


class ReleaseError(NbgraderError):
    """nbgrader could not release the notebook, or a release leaks what students must not see."""


def source_notebook(solution: Path) -> str:
    """The nbgrader source: the solution with the course's install address filled in (publish.py)."""
    return solution.read_text().replace(INSTALL_TOKEN, publish.install_spec())


def render_release(solution: Path) -> str:
    """The release notebook's text, from nbgrader's generate_assignment on `solution`."""
    with tempfile.TemporaryDirectory() as tmp:
        course_dir = Path(tmp)
        write_course_config(course_dir)
        notebook = nbformat.read(generate_assignment(course_dir, source_notebook(solution)), as_version=4)
    notebook.metadata.pop("jupytext", None)
    text = nbformat.writes(notebook) + "\n"
    leaks = [marker for marker in FORBIDDEN_TEXT if marker in text]
    if leaks:
        raise ReleaseError(f"the release still contains {', '.join(leaks)}")
    return text


def release(solution: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / NOTEBOOK
    target.write_text(render_release(solution))
    return target


def is_current(solution: Path, out_dir: Path) -> bool:
    target = out_dir / NOTEBOOK
    return target.is_file() and target.read_text() == render_release(solution)


def student_readme() -> str:
    return f"""# Speculative decoding: the assignment

[Open the notebook in Colab]({publish.colab_url(NOTEBOOK)}) (Runtime > Change runtime type > T4 GPU), fill in
every `# YOUR CODE HERE`, and run the test cells: they tell you where you stand. Its first cell installs
this repository's support package, `specdec_kit` (model loading, offline models, checks, benchmark).

## On your own machine

Python 3.10 or newer. No GPU or internet is needed: on a CPU the notebook runs on the kit's own small models.
From a clone of this repository:

```bash
python3 -m venv .venv && . .venv/bin/activate    # on Windows: .venv\\Scripts\\activate
pip install -e '.[notebook]'                      # the support package, JupyterLab and what they need
jupyter lab {NOTEBOOK}
```

PyTorch on Linux without an NVIDIA GPU: install PyTorch's CPU build before `pip install -e`, with the
command PyTorch's "Get started" page gives for Linux, pip and CPU; a plain `pip install torch` there
downloads several GB of CUDA libraries the CPU never uses. On macOS and Windows the plain install is fine.

To run every cell without a browser (the outputs, test messages included, go into `run.ipynb`):

```bash
jupyter nbconvert --to notebook --execute --allow-errors --output run.ipynb {NOTEBOOK}
```

## How long a run takes on a CPU

The whole notebook on a 2-core CPU with nothing else running:

| notebook | first run on a machine | later runs |
|---|---|---|
| as handed out (every test fails at once) | {RUN_SECONDS["blank"][0]} s | {RUN_SECONDS["blank"][1]} s |
| finished | {RUN_SECONDS["finished"][0]} s | {RUN_SECONDS["finished"][1]} s |

A first run builds the kit's offline models into `~/.cache/specdec-kit`, once per machine: the smallest
pair in the first test cell (seconds), the benchmark's pair in "Try it" (about half a minute); each says
so while it builds. The benchmark cell first checks, in seconds on the smallest pair, that your decoders
give the target's tokens, then prints its sweep and a progress bar; on a CPU it stays under a minute.

## Submitting

Submit the notebook file ({NOTEBOOK}) as your course asks. Grading runs the same checks as the test
cells, with hidden cases on other prompts and models and the kit's own timers and counters, on your
classes outside your notebook: only the imports, functions, classes and constants of your cells are kept.
"""


def export_student_tree(repo: Path, release_notebook: Path, dest: Path, student_readme: str) -> Path:
    """Copy what students may see into `dest` (replaced if it exists) and check it."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in STUDENT_TREE:
        source = repo / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(source, dest / name)
    shutil.copy(release_notebook, dest / NOTEBOOK)
    (dest / "README.md").write_text(student_readme)
    check_student_tree(dest)
    return dest


def check_student_tree(tree: Path) -> None:
    """Raise ReleaseError if the tree holds a solution region, a hidden test or an autograder file."""
    problems = []
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree)
        if relative.parts[0] in {"solutions", "autograder", "tests"}:
            problems.append(f"{relative}: instructor-only directory")
        elif path.is_file() and path.suffix in {".py", ".ipynb", ".md", ".json", ".toml", ".txt"}:
            text = path.read_text(errors="replace")
            problems += [f"{relative}: contains {marker!r}" for marker in FORBIDDEN_TEXT if marker in text]
    if problems:
        raise ReleaseError("the student tree leaks instructor material:\n" + "\n".join(problems))
