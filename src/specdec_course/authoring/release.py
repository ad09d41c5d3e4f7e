"""`specdec-course release`: the student notebook, cut from the solution by nbgrader, and the visible checks'
recorded answers (`answers.py`).

    specdec-course release                      # solutions/ -> assignment/speculative_decoding.ipynb
    specdec-course release --check              # exit 1 if assignment/ or the answers differ from a fresh release
    specdec-course release --student-repo DIR   # instead, export the tree the course publishes to students

nbgrader's generate_assignment runs in a throw-away course directory; its output is written with
the notebook's cell ids kept and jupytext's pairing metadata dropped, so two releases are identical
byte for byte. The install address and Colab link are those set in autograder/config.toml (config.py).
The student tree holds the release notebook, the student package (src/specdec_kit with the student
distribution's pyproject.toml), data/, a .gitignore, constraints.txt (environment.yml's pins, which the README's
commands and the set-up cell pass to pip) and a student README; never the instructor package, solutions/,
autograder/ or tests/, which `check_student_tree` verifies. It is written into DIR
in place: `.git` and files the kit did not write stay, and a manifest (MANIFEST) lists what it wrote.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from ..core import config as course_config
from ..core import pins
from ..core.nbgrader_course import FORBIDDEN_TEXT, NOTEBOOK, NbgraderError, generate_assignment, write_course_config

# What the student tree holds (its path: the repository's path): the student distribution and its data.
STUDENT_TREE = {"src/specdec_kit": "src/specdec_kit", "data": "data",
                "pyproject.toml": "packaging/student/pyproject.toml", ".gitignore": "packaging/student/gitignore"}
STUDENT_ANSWERS = "src/specdec_kit/checks/answers.json"  # the visible checks' recorded answers, in the tree
INSTRUCTOR_ONLY = ("solutions", "autograder", "tests", "packaging", "specdec_course")
# Seconds of a whole run (blank or finished; first run on a machine, later runs), recorded by `specdec-course
# time-notebook [--finished] [--fresh-cache] --record docs/figures/notebook-times.json`; the student README states them.
NOTEBOOK_TIMES = Path(__file__).resolve().parents[3] / "docs" / "figures" / "notebook-times.json"
INSTALL_TOKEN = "{{KIT_INSTALL}}"
PINS_TOKEN = "{{KIT_PINS}}"  # the set-up cell's constraints.txt address
MANIFEST = ".specdec-export"
MANIFEST_HEADER = "# Written by `specdec-course release --student-repo`: the files it wrote, replaced on each export.\n"

log = logging.getLogger(__name__)


class ReleaseError(NbgraderError):
    """nbgrader could not release the notebook, or a release leaks what students must not see."""


def source_notebook(solution: Path, config: course_config.CourseConfig | None = None) -> str:
    """The nbgrader source: the solution with the course's install address and constraints.txt address filled in.

    `config` defaults to ./autograder/config.toml's."""
    config = config or course_config.load_config()
    return (solution.read_text().replace(INSTALL_TOKEN, course_config.install_spec(config))
            .replace(PINS_TOKEN, course_config.constraints_url(config)))


def render_release(solution: Path, config: course_config.CourseConfig | None = None) -> str:
    """The release notebook's text, from nbgrader's generate_assignment on `solution`."""
    import nbformat  # seconds to import: commands that refuse early never need it

    with tempfile.TemporaryDirectory() as tmp:
        course_dir = Path(tmp)
        write_course_config(course_dir)
        notebook = nbformat.read(generate_assignment(course_dir, source_notebook(solution, config)), as_version=4)
    notebook.metadata.pop("jupytext", None)
    text = nbformat.writes(notebook) + "\n"
    leaks = [marker for marker in FORBIDDEN_TEXT if marker in text]
    if leaks:
        raise ReleaseError(f"the release still contains {', '.join(leaks)}")
    return text


def release(solution: Path, out_dir: Path, config: course_config.CourseConfig | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / NOTEBOOK
    target.write_text(render_release(solution, config))
    return target


def checkout_answers(repo: Path) -> Path:
    """The answers file `release` writes: `repo`'s own (a checkout, its root), which must be the file of the student
    package this process imports, as its checks record the answers. An installed copy's (site-packages) is refused:
    it would be rewritten while the checkout keeps its stale one."""
    from specdec_kit.checks import answers as recorded  # the kit's checks: only once a command needs them

    path, imported = (repo / STUDENT_ANSWERS).resolve(), recorded.ANSWERS_FILE.resolve()
    package = Path(STUDENT_ANSWERS).parents[1]
    if not (repo / package).is_dir():
        raise ValueError(f"{repo.resolve()} is not the course's checkout (it has no {package}): run specdec-course "
                         "release from the checkout's root")
    if imported != path:
        where = "an installed copy" if {"site-packages", "dist-packages"} & set(imported.parts) else "another copy"
        raise ValueError(f"the student package imported here is {imported.parents[1]}, {where}, not this checkout's "
                         f"{package}: the release writes the answers only into the checkout, recorded with its own "
                         f"code. Install the checkout in editable mode (pip install -e .) and run again")
    return path


def points_note(solution: Path, replaced: Path) -> str | None:
    """The note "the total is now 102 points, was 100" where a release of `solution` moves the assignment's total from
    that of `replaced`, the release notebook it replaces (assignment/'s, or a previous export's); None where the total
    stays, or `replaced` is no notebook with points (a first release)."""
    import nbformat

    from .points import notebook_points, total_change

    try:
        was = notebook_points(nbformat.read(replaced, as_version=4)).total
    except (OSError, ValueError, KeyError, AttributeError):  # none there, or not a notebook the kit wrote
        return None
    return total_change(notebook_points(nbformat.read(solution, as_version=4)).total, {str(replaced): was})


def is_current(solution: Path, out_dir: Path, config: course_config.CourseConfig | None = None) -> bool:
    target = out_dir / NOTEBOOK
    return target.is_file() and target.read_text() == render_release(solution, config)


def run_seconds(path: Path = NOTEBOOK_TIMES) -> dict[str, tuple[int, int]]:
    """{"blank" or "finished": (seconds on a first run, on later runs)}, as time-notebook recorded them."""
    try:
        data = json.loads(path.read_text())
        return {which: (data[which]["fresh"]["seconds"], data[which]["warm"]["seconds"])
                for which in ("blank", "finished")}
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"{path} does not hold the notebook's four run times ({type(e).__name__}: {e}): run "
                         "specdec-course time-notebook [--finished] [--fresh-cache] --record with it") from None


CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's own index of CPU-only builds
# The specdec-kit commands the student README shows, each run from the tree's root on the notebook there.
KIT_COMMANDS = (("specdec-kit rounds", "every round of one decode by your CachedSpeculativeDecoder: out/rounds.html"),
                ("specdec-kit demo --pair tiny --k 3", "your cached decoder over the kit's prompts, against the "
                                                       "target alone"),
                ("specdec-kit bench --pair tiny --k 1,2,4 --repeats 2 --limit 2", "the benchmark over a k sweep, into "
                                                                                   "out/bench/"),
                ("specdec-kit zoo", "build the kit's offline models now (a first run builds them anyway)"))


def student_readme(config: course_config.CourseConfig | None = None) -> str:
    colab = course_config.colab_url(config or course_config.load_config(), NOTEBOOK)
    seconds = run_seconds()
    torch = pins.environment_pins()["torch"]
    constraints = pins.CONSTRAINTS_NAME
    width = max(len(command) for command, _ in KIT_COMMANDS)
    kit_commands = "\n".join(f"{command:<{width}}  # {what}" for command, what in KIT_COMMANDS)
    return f"""# Speculative decoding: the assignment

[Open the notebook in Colab]({colab}) (Runtime > Change runtime type > T4 GPU), fill in
every `# YOUR CODE HERE`, and run the test cells: they tell you where you stand. Its first cell installs
this repository's support package, `specdec_kit` (model loading, offline models, checks, benchmark), at
this tag. What pip adds for it comes at the versions in `{constraints}`, the ones the course tested;
what Colab already has stays as it is (its torch, built for its GPU, and its transformers: the kit runs on
transformers 4.x and 5.x). Where the kit is installed already, as below, the cell does nothing.

## On your own machine

Python 3.11 or newer, and internet for the install; after it, neither a GPU nor internet is needed: on a CPU
the notebook runs on the kit's own small models.
From a clone of this repository:

```bash
python3 -m venv .venv && . .venv/bin/activate   # on Windows: .venv\\Scripts\\activate
pip install -c {constraints} torch=={torch}      # PyTorch first, at the course's version
pip install -c {constraints} -e ".[notebook]"   # the support package, JupyterLab and what they need
jupyter lab {NOTEBOOK}
```

`{constraints}` holds the versions the course tested the kit with (PyTorch, transformers, Jupyter and
the rest); with `-c`, pip installs those versions of them and of what they need, not newer releases the course
has not tried.

On Linux without an NVIDIA GPU, install PyTorch with this line instead of the second one: the plain
`pip install torch` also downloads several GB of CUDA libraries that a CPU never uses, and PyTorch's own index
serves a CPU-only build of the same version (on macOS and Windows the plain line installs the CPU build):

```bash
pip install -c {constraints} torch=={torch} --extra-index-url {CPU_INDEX}
```

To run every cell without a browser (the outputs, test messages included, go into `run.ipynb`; on Windows, leave
out `--KernelManager.transport=ipc`, which keeps the kernel's messages on local sockets):

```bash
jupyter nbconvert --to notebook --execute --allow-errors --KernelManager.transport=ipc --output run.ipynb {NOTEBOOK}
```

`.gitignore` keeps `.venv/`, `run.ipynb` and the commands' `out/` folder out of your commits.

## How long a run takes on a CPU

The whole notebook on a 2-core CPU with nothing else running, as the course measured it:

| notebook | first run on a machine | later runs |
|---|---|---|
| as handed out (every test fails at once) | {seconds["blank"][0]} s | {seconds["blank"][1]} s |
| finished, the three bonus parts included | {seconds["finished"][0]} s | {seconds["finished"][1]} s |

A busy machine multiplies these times: other programs that keep its cores busy slow every cell down, and the
benchmark cells say so when they measure it. A first run builds the kit's offline models into
`~/.cache/specdec-kit`, once per machine: the imports cell says which it builds and how long each took. Each
bonus part's benchmark runs once its class decodes the smallest pair as its target does; until then the cell says
so in one line and moves on.

## The `specdec-kit` command

Installed with the support package; run from this repository's root, each command uses the classes of
`{NOTEBOOK}` there (finish the ones it runs first), and `specdec-kit COMMAND --help` gives its options:

```bash
{kit_commands}
```

## Submitting

Submit the notebook file ({NOTEBOOK}) as your course asks. Grading runs the same checks as the test
cells, with hidden cases on other prompts and models and the kit's own timers and counters, on your
classes outside your notebook: only the imports, functions, classes and constants of your cells are kept.
"""


def export_student_tree(repo: Path, release_notebook: Path, dest: Path, student_readme: str,
                        answers: str | None = None) -> Path:
    """Write what students may see into `dest`, checked first: a new directory, an empty one or a previous export;
    `answers` is the text of the recorded answers to ship (default: the repository's answers.json).

    Only the kit's files are written (replaced if there); `.git` and whatever else the kit did not write stay.
    A file the previous export wrote (its MANIFEST lists it) that this one no longer writes is removed. A
    directory holding other files and no MANIFEST raises ValueError before anything is written."""
    previous = previous_export(dest)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp)
        for name, source_name in STUDENT_TREE.items():
            source = repo / source_name
            if source.is_dir():
                shutil.copytree(source, staged / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy(source, staged / name)
        shutil.copy(release_notebook, staged / NOTEBOOK)
        if answers is not None:
            (staged / STUDENT_ANSWERS).write_text(answers)
        (staged / pins.CONSTRAINTS_NAME).write_text(pins.constraints(repo / "environment.yml"))
        (staged / "README.md").write_text(student_readme)
        check_student_tree(staged)
        written = sorted(path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file())
        dest.mkdir(parents=True, exist_ok=True)
        _write_manifest(dest, sorted(previous | set(written)))  # an export stopped half-way still lists its files
        for name in written:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():  # replace the link, never write through it
                target.unlink()
            shutil.copy(staged / name, target)
    for name in sorted(previous - set(written)):
        _remove(dest, name)
    _write_manifest(dest, written)
    return dest


def previous_export(dest: Path) -> set[str]:
    """The files the last export into `dest` wrote, from its MANIFEST; none for a new or empty directory.

    Raises ValueError for a directory holding other files (`.git` aside) and no MANIFEST."""
    if not dest.exists():
        return set()
    if not dest.is_dir():
        raise ValueError(f"{dest} is a file, not a directory for the student repository")
    manifest = dest / MANIFEST
    if not manifest.is_file():
        if any(path.name != ".git" for path in dest.iterdir()):
            raise ValueError(f"{dest} holds files but no {MANIFEST}, so it is not a previous export of the kit; "
                             "nothing was written. Export into a new or empty directory (a fresh clone of the "
                             "student repository is fine) or into a previous export")
        return set()
    names = {line.strip() for line in manifest.read_text().splitlines() if line.strip() and not line.startswith("#")}
    for name in names:
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"{manifest}: {name!r} is not a path inside {dest}; nothing was written")
    return names


def _write_manifest(dest: Path, names: list[str]) -> None:
    (dest / MANIFEST).write_text(MANIFEST_HEADER + "".join(f"{name}\n" for name in names))


def _remove(dest: Path, name: str) -> None:
    """Delete a file an earlier export wrote, and the folders it leaves empty."""
    path = dest / name
    if not (path.is_file() or path.is_symlink()):
        return
    path.unlink()
    log.info("removed %s: the kit no longer writes it", path)
    for folder in path.parents:
        if folder == dest or any(folder.iterdir()):
            break
        folder.rmdir()


def check_student_tree(tree: Path) -> None:
    """Raise ReleaseError if the tree holds a solution region, a hidden test, the instructor package or an
    autograder file."""
    problems = []
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree)
        if set(relative.parts) & set(INSTRUCTOR_ONLY):
            problems.append(f"{relative}: instructor-only")
        elif path.is_file() and path.suffix in {".py", ".ipynb", ".md", ".json", ".toml", ".txt"}:
            text = path.read_text(errors="replace")
            problems += [f"{relative}: contains {marker!r}" for marker in FORBIDDEN_TEXT if marker in text]
    if problems:
        raise ReleaseError("the student tree leaks instructor material:\n" + "\n".join(problems))
