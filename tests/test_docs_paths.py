"""Every file and module the README, the docs pages, environment.yml and autograder/config.toml name exists, so a
file or module that moves cannot leave them pointing at nothing. Four kinds of name are read: repository paths
(`src/...`, `tests/...`, `.ci/run`; a glob must match something), package paths, read under src/
(`specdec_course/sandbox/box.py`), Markdown links, read from the page's folder, and dotted names (`specdec_kit.` or
`specdec_course.`, then modules under src/, then at most a name the module defines and a name that class defines),
read with `ast`, nothing imported. The finder proves itself on planted stale names.

Example run: python -m pytest tests/test_docs_paths.py -q
"""

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO

PAGES = ["README.md", "environment.yml", "autograder/config.toml",
         *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
ROOTS = ("src", "tests", "autograder", "docs", "packaging", "solutions", "assignment", "data", r"\.ci")
PACKAGES = ("specdec_kit", "specdec_course")
# A name starts after a space, a quote or a bracket: not inside a URL, another path or a longer word.
_START = r"(?<![\w./-])"
REPO_PATH = re.compile(rf"{_START}((?:{'|'.join(ROOTS)})/[\w./*-]*)")
PACKAGE_PATH = re.compile(rf"{_START}((?:{'|'.join(PACKAGES)})/[\w./*-]*)")
DOTTED = re.compile(rf"{_START}((?:{'|'.join(PACKAGES)})(?:\.\w+)+)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _defined(body: list[ast.stmt]) -> set[str]:
    """The names a module's or a class's statements define, in `if`/`try`/`with` blocks too."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):  # their bodies are theirs
            for block in ("body", "orelse", "finalbody", "handlers"):
                names |= _defined(getattr(node, block, []))
    return names


def dotted_exists(name: str, src: Path = REPO / "src") -> bool:
    """Whether `name` is a module under `src`, a name that module defines, or a name that class defines."""
    parts = name.split(".")
    folder, module, index = src / parts[0], src / parts[0] / "__init__.py", 1
    while index < len(parts) and folder is not None:  # modules first: packages, then at most one file
        if (folder / parts[index] / "__init__.py").is_file():
            folder, module = folder / parts[index], folder / parts[index] / "__init__.py"
        elif (folder / f"{parts[index]}.py").is_file():
            folder, module = None, folder / f"{parts[index]}.py"
        else:
            break
        index += 1
    names = parts[index:]
    if not module.is_file() or not names:
        return module.is_file()
    body = ast.parse(module.read_text()).body
    if names[0] not in _defined(body) or len(names) > 2:
        return False
    classes = [node for node in body if isinstance(node, ast.ClassDef) and node.name == names[0]]
    return len(names) == 1 or (bool(classes) and names[1] in _defined(classes[0].body))


def _path_exists(path: str, base: Path) -> bool:
    return bool(list(base.glob(path))) if "*" in path else (base / path).exists()


def stale_names(page: Path, repo: Path = REPO) -> list[str]:
    """The names `page` gives that point at nothing in `repo`."""
    text = page.read_text()
    paths = [m.rstrip(".") for m in REPO_PATH.findall(text)]  # a path that ends a sentence
    stale = [m for m in paths if not _path_exists(m, repo)]
    stale += [m.rstrip(".") for m in PACKAGE_PATH.findall(text) if not _path_exists(m.rstrip("."), repo / "src")]
    stale += [m for m in DOTTED.findall(text) if not dotted_exists(m, repo / "src")]
    if page.suffix == ".md":
        links = [m.split("#")[0] for m in LINK.findall(text) if "://" not in m and not m.startswith(("#", "mailto:"))]
        stale += [link for link in links if link and not _path_exists(link, page.parent)]
    return sorted(set(stale))


@pytest.mark.parametrize("page", PAGES)
def test_every_named_file_and_module_exists(page):
    stale = stale_names(REPO / page)
    assert not stale, f"{page} names what does not exist in the repository (moved or renamed?): {stale}"


def test_the_finder_sees_planted_stale_names(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("Real: `src/specdec_kit/zoo/__init__.py`, `tests/test_layers.py`, `.ci/run`, "
                    "`tests/kit/test_*.py`, "
                    "`specdec_course/sandbox/box.py`, `specdec_course.core.pins`, "
                    "`specdec_kit.core.no_progress.CAUSE_WORDS`, `specdec_kit.cache_kwargs`, "
                    "[link](../README.md#quick-start), https://x.org/src/none.py, "
                    "at the end of tests/conftest.py.\n"
                    "Stale: `src/specdec_course/pins.py`, `.ci/gone`, `tests/kit/test_none_*.py`, "
                    "`specdec_course/none.py`, `specdec_course.pins`, `specdec_kit.core.timing.NOT_THERE`, "
                    "`specdec_kit.zoo.PairSpec.not_a_field`, [gone](gone.md).\n")
    for real in ("README.md", "src", "tests", ".ci"):
        (tmp_path / real).symlink_to(REPO / real)
    assert stale_names(page, tmp_path) == sorted([
        "src/specdec_course/pins.py", ".ci/gone", "tests/kit/test_none_*.py", "specdec_course/none.py",
        "specdec_course.pins", "specdec_kit.core.timing.NOT_THERE", "specdec_kit.zoo.PairSpec.not_a_field",
        "gone.md"]), (
        "the finder should name exactly the planted stale names"
    )
