"""What students receive: the published tree and the student distribution built from it hold the student package
alone, no module of the instructor package, no function that implements a graded method or an extra-credit part,
and no line of the solution's solution regions; installed as the notebook's set-up cell installs it (pip from a
git URL, here a local one) into a fresh virtual environment, the blank notebook runs with only its tests failing.
The tree's constraints.txt is environment.yml's pins; the README's commands and the set-up cell install with it.

Example run: python -m pytest tests/course/authoring/test_student_distribution.py -q
"""

import ast
import importlib.metadata
import importlib.util
import inspect
import json
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from packaging.requirements import Requirement

from specdec_course.authoring import release
from specdec_course.bench import hf_methods
from specdec_course.core import config as course_config
from specdec_course.core import oracle, pins
from specdec_course.core.nbgrader_course import BEGIN_SOLUTION, END_SOLUTION
from specdec_kit.bench import runners

from conftest import REPO

SOLUTION = REPO / "solutions" / "speculative_decoding.py"
RELEASE = REPO / "assignment" / release.NOTEBOOK
TEXT_SUFFIXES = {".py", ".ipynb", ".md", ".json", ".toml", ".txt", ".cfg"}
MIN_LINE = 24  # characters: shorter solution lines (`return tokens`) may occur anywhere by chance


# Loading is the student package's by design (the kit loads its own models for the benchmark and the checks):
# the solution's loading methods write the same from_pretrained and pad-token lines as specdec_kit.models.loading.
SHARED_WITH_KIT = ("initialize_target_model", "initialize_draft_model")


def solution_regions() -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each `### BEGIN SOLUTION` ... `### END SOLUTION` region of the solution, those
    of SHARED_WITH_KIT aside."""
    regions, current, start, method = [], None, 0, ""
    for number, line in enumerate(SOLUTION.read_text().splitlines(), 1):
        if line.strip().startswith("def "):
            method = line.strip()[4:].split("(")[0]
        if line.strip() == BEGIN_SOLUTION:
            current, start = [], number
        elif line.strip() == END_SOLUTION:
            if method not in SHARED_WITH_KIT:
                regions.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    assert regions, f"no solution region found in {SOLUTION}"
    return regions


def graded_names() -> set[str]:
    """Every function or method of the solution that holds a solution region (constructors aside): what students
    write."""
    starts = [start for start, _ in solution_regions()]
    return {node.name for node in ast.walk(ast.parse(SOLUTION.read_text()))
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("__")
            and any(node.lineno < s <= node.end_lineno for s in starts)}


def oracle_names() -> set[str]:
    """The instructor package's implementations of rounds: the oracle's functions, and HF's round readers that the
    student package does not define itself."""
    def functions(module) -> set[str]:
        return {name for name, f in inspect.getmembers(module, inspect.isfunction) if f.__module__ == module.__name__}
    return functions(oracle) | (functions(hf_methods) - set(vars(runners)))


def solution_lines() -> set[str]:
    return {line.strip() for _, lines in solution_regions() for line in lines
            if len(line.strip()) >= MIN_LINE and not line.strip().startswith("#")}


def leaks(root: Path) -> list[str]:
    """What `root` (a published tree or an unpacked wheel) holds that students must not receive."""
    problems = []
    graded, implemented, lines = graded_names(), oracle_names(), solution_lines()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if "specdec_course" in relative or relative.split("/")[0] in ("autograder", "solutions", "tests", "packaging"):
            problems.append(f"{relative}: instructor-only")
        if path.suffix not in TEXT_SUFFIXES:
            continue
        text = path.read_text(errors="replace")
        problems += [f"{relative}: holds the solution's line {line!r}" for line in sorted(lines)
                     if line in {row.strip() for row in text.splitlines()}]
        if path.suffix == ".py":
            tree = ast.parse(text)
            module_level = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
            problems += [f"{relative}: defines {name}, which students write" for name in sorted(defined & graded)]
            problems += [f"{relative}: defines {name}, the oracle's" for name in sorted(module_level & implemented)]
    return problems


def constraint_pins(text: str) -> dict[str, str]:
    """{name, lower case: version} of a constraints file's `name==version` lines."""
    lines = (line.strip() for line in text.splitlines())
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines)
            if version and not name.startswith("#")}


def set_up_cell(notebook_path: Path = RELEASE) -> nbformat.NotebookNode:
    [setup] = [c for c in nbformat.read(notebook_path, as_version=4).cells
               if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"]
    return setup


def with_addresses(source: str, kit: str, constraints: str) -> str:
    """The set-up cell's source installing `kit` with the constraints file at the URL `constraints`."""
    values = {"KIT = ": kit, "PINS = ": constraints}
    return "\n".join(next((f"{start}{value!r}" for start, value in values.items() if line.startswith(start)), line)
                     for line in source.splitlines())


def readme_commands(readme: str) -> list[list[str]]:
    """The commands of the README's bash blocks, each split as a shell splits it (comments dropped, one command
    either side of `&&`)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme, re.S):
        for line in block.splitlines():
            command = []
            for word in shlex.split(line, comments=True) + ["&&"]:
                if word != "&&":
                    command.append(word)
                elif command:
                    commands.append(command)
                    command = []
    return commands


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    return release.export_student_tree(REPO, RELEASE, tmp_path_factory.mktemp("published") / "student",
                                       release.student_readme())


def test_the_guard_knows_what_students_write():
    graded, implemented = graded_names(), oracle_names()
    assert {"generate_draft_tokens", "verify_tokens_vectorized", "speculative_decode", "rollback", "cached_prefix",
            "accept_sampled", "lookup_drafts", "next_k"} <= graded, sorted(graded)
    assert {"predict_rounds", "lookup_rounds", "schedule_k", "predict_adaptive_rounds",
            "rounds_from_target_calls"} <= implemented, sorted(implemented)
    assert len(solution_lines()) > 50, "the solution regions' lines to look for"


def test_the_guard_sees_a_planted_answer(tmp_path):
    for planted in ("def schedule_k(reached, rejected, costs, max_k):\n    return 1\n",
                    "class Helper:\n    def verify_tokens_vectorized(self):\n        pass\n",
                    f"x = 1\n{sorted(solution_lines())[0]}\n"):
        (tmp_path / "helper.py").write_text(planted)
        assert leaks(tmp_path), f"the guard should flag {planted!r}"


def test_published_tree_holds_the_student_package_alone(published):
    assert leaks(published) == [], "the published tree leaks:\n" + "\n".join(leaks(published))
    assert sorted(p.name for p in (published / "src").iterdir()) == ["specdec_kit"], list((published / "src").iterdir())
    assert (published / "src" / "specdec_kit" / "checks" / "answers.json").is_file(), "the recorded answers ship"


def test_published_tree_holds_the_environment_pins(published):
    shipped = published / pins.CONSTRAINTS_NAME
    assert shipped.is_file(), f"the published tree should hold {pins.CONSTRAINTS_NAME}, the course's tested versions"
    environment = pins.environment_pins(REPO / "environment.yml")
    assert constraint_pins(shipped.read_text()) == environment, (
        f"{pins.CONSTRAINTS_NAME} should pin exactly environment.yml's versions: it has "
        f"{constraint_pins(shipped.read_text())}, environment.yml {environment}"
    )


def test_readme_commands_use_files_of_the_published_tree(published):
    commands = readme_commands((published / "README.md").read_text())
    installs = [command[2:] for command in commands if command[:2] == ["pip", "install"]]
    torch = f"torch=={pins.environment_pins(REPO / 'environment.yml')['torch']}"
    assert installs and installs[0] == ["-c", pins.CONSTRAINTS_NAME, torch], (
        f"the README should install {torch} first, under the course's pins: {installs}"
    )
    assert any(args[:2] == ["-c", pins.CONSTRAINTS_NAME] and "-e" in args for args in installs), (
        f"the README should install the kit with `-c {pins.CONSTRAINTS_NAME}`: {installs}"
    )
    extras = tomllib.loads((published / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for args in installs:
        for flag, value in zip(args, args[1:]):
            if flag in ("-c", "-r"):
                assert (published / value).is_file(), f"`pip install {' '.join(args)}` names {value}, not in the tree"
            if flag == "-e":
                path, _, wanted = value.rstrip("]").partition("[")
                assert (published / path / "pyproject.toml").is_file(), f"`-e {value}`: no pyproject.toml at {path}"
                assert set(filter(None, wanted.split(","))) <= set(extras), f"`-e {value}`: extras are {sorted(extras)}"
    opened = [command[-1] for command in commands if command[0] == "jupyter"]
    assert opened and all((published / name).is_file() for name in opened), (
        f"the README's jupyter commands open {opened}; the tree holds {sorted(p.name for p in published.iterdir())}"
    )


INSTRUCTOR_NAMES = re.compile(r"specdec-course|specdec_course|(?<![\w-])(solutions|autograder|assignment|docs|tests)/")


def test_nothing_students_read_names_an_instructor_command_or_folder(published):
    """The notebook and the README speak of what the tree holds: no instructor command, no folder of the course's."""
    found = {name: sorted({m.group(0) for m in INSTRUCTOR_NAMES.finditer((published / name).read_text())})
             for name in (release.NOTEBOOK, "README.md")}
    assert not any(found.values()), f"what students read names the instructors' commands or folders: {found}"


def test_published_tree_ignores_what_runs_leave_behind(published):
    ignored = (published / ".gitignore").read_text().splitlines()
    assert {".venv/", "run.ipynb", "out/"} <= set(ignored), f"the tree's .gitignore: {ignored}"


def test_set_up_cell_pins_what_it_adds_and_keeps_what_the_runtime_has(published, monkeypatch):
    source = set_up_cell().source
    config = course_config.load_config(REPO / "autograder")
    assert f'PINS = "{course_config.constraints_url(config)}"' in source, (
        f"the release's set-up cell should read {course_config.constraints_url(config)}, the tree's constraints at "
        "the tag"
    )
    runtime = ("torch", "transformers", "numpy", "pandas", "ipykernel")  # some of what Colab ships
    calls = []
    monkeypatch.delenv("SPECDEC_GRADING", raising=False)
    monkeypatch.setattr(importlib.metadata, "distributions",
                        lambda: [SimpleNamespace(metadata={"Name": name.capitalize()}) for name in runtime])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)  # the kit is not installed
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: calls.append(args))
    exec(with_addresses(source, "specdec-kit @ git+file://localhost/kit@v-test",
                        (published / pins.CONSTRAINTS_NAME).as_uri()), {})
    [args] = calls
    assert args[-1] == "specdec-kit @ git+file://localhost/kit@v-test" and "-c" in args, (
        f"the set-up cell should pip install the kit with a constraints file: {args}"
    )
    applied = Path(args[args.index("-c") + 1])
    used = constraint_pins(applied.read_text())
    applied.unlink()
    expected = {name: version for name, version in pins.environment_pins(REPO / "environment.yml").items()
                if name not in runtime}
    assert used == expected, (
        f"the set-up cell should pin every package of {pins.CONSTRAINTS_NAME} but those installed already "
        f"({', '.join(runtime)}): it pinned {used}"
    )


def test_notebook_extra_holds_ipywidgets():
    repo, student = (tomllib.loads(path.read_text())["project"]
                     for path in (REPO / "pyproject.toml", REPO / "packaging" / "student" / "pyproject.toml"))
    assert (student["dependencies"], student["optional-dependencies"]["notebook"]) == (
        repo["dependencies"], repo["optional-dependencies"]["notebook"]
    ), "the student distribution should require what the repository's pyproject.toml does"
    notebook = {Requirement(r).name for r in student["optional-dependencies"]["notebook"]}
    assert "ipywidgets" in notebook, f"the notebook extra needs ipywidgets for tqdm's progress bars: {notebook}"


@pytest.mark.slow  # pip builds the wheel
@pytest.mark.release
def test_student_distribution_holds_the_student_package_alone(published, tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(published)], check=True)
    wheel = next(tmp_path.glob("specdec_kit-*.whl"))
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    assert leaks(unpacked) == [], "the student wheel leaks:\n" + "\n".join(leaks(unpacked))
    packages = {p.name for p in unpacked.iterdir() if not p.name.endswith(".dist-info")}
    assert packages == {"specdec_kit"}, f"the wheel should hold the student package alone, got {packages}"
    for data in ("data/prompts.json", "bench/bench_schema.json", "checks/answers.json"):
        assert (unpacked / "specdec_kit" / data).is_file(), f"the wheel ships {data}"
    entry_points = next(unpacked.glob("*.dist-info")).joinpath("entry_points.txt").read_text()
    assert "specdec-kit" in entry_points and "specdec-course" not in entry_points, entry_points


@pytest.mark.slow  # a fresh venv: pip installs torch, transformers and nbconvert (minutes)
@pytest.mark.release
def test_set_up_cell_installs_the_published_tree_and_the_blank_notebook_runs(published, tmp_path):
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=published, check=True)
    subprocess.run(["git", "add", "-A"], cwd=published, check=True)
    subprocess.run(["git", "-c", "user.name=course", "-c", "user.email=course@example.org", "commit", "-q", "-m",
                    "release"], cwd=published, check=True)
    subprocess.run(["git", "tag", "v-test"], cwd=published, check=True)
    notebook = nbformat.read(published / release.NOTEBOOK, as_version=4)
    [setup] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"]
    url = f"specdec-kit @ git+file://localhost{published}@v-test"  # pip wants a host in a git+file URL
    setup.source = with_addresses(setup.source, url, (published / pins.CONSTRAINTS_NAME).as_uri())
    nbformat.write(notebook, tmp_path / release.NOTEBOOK)
    venv = tmp_path / "venv"
    script = "\n".join(["set -euxo pipefail", f"python3 -m venv {venv}",
                        f"{venv}/bin/pip install -q -c {published / pins.CONSTRAINTS_NAME} torch",
                        f"{venv}/bin/pip install -q nbconvert ipykernel",
                        f"{venv}/bin/jupyter nbconvert --to notebook --execute --allow-errors --output run.ipynb "
                        f"{release.NOTEBOOK}"])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home())}
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, f"the fresh install failed (rc {run.returncode}):\n{run.stderr[-3000:]}"
    probe = ("import importlib.util, json\n"
             "print(json.dumps([importlib.util.find_spec(m) is not None for m in ('specdec_kit', 'specdec_course')]))")
    installed = subprocess.run([f"{venv}/bin/python", "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(installed) == [True, False], f"the set-up cell installs specdec_kit alone: {installed}"
    executed = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    errors = {c.metadata.get("nbgrader", {}).get("grade_id") or c.source[:40]: [o for o in c.outputs
                                                                                 if o.output_type == "error"]
              for c in executed.cells if c.cell_type == "code"}
    tests = {name: found for name, found in errors.items() if name.startswith("test_")}
    assert len(tests) == 13 and all([o.ename for o in found] == ["NotImplementedError"] for found in tests.values()), \
        f"every test cell should fail at the student's first NotImplementedError: {tests}"
    # A demo cell that needs an unfinished decoder stops at the benchmark's preflight, which says what to finish
    # first; the names later cells use stay defined, so none fails on a name never defined.
    demo = {c.source[:40] for c in executed.cells if "demo" in c.metadata.get("tags", [])}
    others = {name: [o.ename for o in found] for name, found in errors.items() if found and name not in tests
              and not (name in demo and {o.ename for o in found} == {"NotReadyError"})}
    assert not others, f"nothing but the test cells and unfinished demos may fail in a blank run: {others}"
