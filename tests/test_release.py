"""The student release: stubs that fail at once, and a student tree with nothing instructors keep."""

import subprocess
import sys
import zipfile

import pytest

from specdec_kit import checks
from specdec_kit.adapters import load_decoder_classes
from specdec_kit.course import release

from conftest import REPO

RELEASE = REPO / "assignment" / release.NOTEBOOK


def test_blank_release_fails_every_check_at_once():
    classes = load_decoder_classes(RELEASE)
    for check in (checks.check_loading, checks.check_draft_tokens, checks.check_exact):
        with pytest.raises(NotImplementedError):
            check(classes["SpeculativeDecoder"])
    with pytest.raises(NotImplementedError):
        checks.check_cache_use(classes["CachedSpeculativeDecoder"])


def test_release_holds_no_solution_or_hidden_test():
    text = RELEASE.read_text()
    assert not [marker for marker in release.FORBIDDEN_TEXT if marker in text], (
        "the release notebook should hold no solution or hidden-test marker, found "
        f"{[marker for marker in release.FORBIDDEN_TEXT if marker in text]}"
    )
    assert "raise NotImplementedError()" in text and release.INSTALL_TOKEN not in text, (
        f"the release notebook should hold `raise NotImplementedError()` stubs and not {release.INSTALL_TOKEN!r}"
    )


def test_student_tree_is_checked(tmp_path):
    tree = release.export_student_tree(REPO, RELEASE, tmp_path / "student", release.student_readme())
    assert sorted(p.name for p in tree.iterdir()) == ["README.md", "data", "pyproject.toml", release.NOTEBOOK, "src"], (
        f"the student tree should hold only README.md, data, pyproject.toml, {release.NOTEBOOK} and src, "
        f"got {sorted(p.name for p in tree.iterdir())}"
    )
    leak = tree / "src" / "specdec_kit" / "leak.py"
    leak.write_text(f"# {release.FORBIDDEN_TEXT[0]}\n")
    with pytest.raises(release.ReleaseError, match="leak.py"):
        release.check_student_tree(tree)


@pytest.mark.slow  # pip builds the wheel
def test_built_wheel_holds_no_instructor_material(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True)
    wheel = next(tmp_path.glob("specdec_kit-*.whl"))
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    release.check_student_tree(unpacked)
    assert (unpacked / "specdec_kit" / "data" / "prompts.json").is_file(), "the wheel ships the prompts"
    assert (unpacked / "specdec_kit" / "bench_schema.json").is_file(), "the wheel ships the benchmark's JSON schema"
