"""The student release: stubs that fail at once, a student tree with nothing instructors keep, published only
with the course's own repository and tag (placeholders refused before any work), created or updated in place, and
the instructor's checkout left as it was."""

import shutil
import subprocess
import sys
from datetime import timedelta

import nbformat
import pytest

from specdec_course.authoring import answers, release
from specdec_course.authoring.points import notebook_points
from specdec_course.cli import main
from specdec_course.core import config as course_config
from specdec_course.core import pins
from specdec_kit import checks
from specdec_kit.protocol.adapters import load_decoder_classes

from conftest import REPO

RELEASE = REPO / "assignment" / release.NOTEBOOK
KIT_FILES = sorted([".gitignore", "README.md", "data", "pyproject.toml", release.NOTEBOOK, "src", release.MANIFEST,
                    pins.CONSTRAINTS_NAME])


def write_config(tmp_path, **values) -> str:
    """A copy of the shipped autograder/ whose config.toml has `values` (key = TOML literal) set; its directory."""
    autograder = tmp_path / "autograder"
    shutil.copytree(REPO / "autograder", autograder, ignore=shutil.ignore_patterns("__pycache__"))
    lines = (REPO / "autograder" / "config.toml").read_text().splitlines()
    for key, value in values.items():
        lines = [f"{key} = {value}" if line.startswith(f"{key} =") else line for line in lines]
    (autograder / "config.toml").write_text("\n".join(lines) + "\n")
    return str(autograder)


def snapshot(tree) -> dict:
    return {path.relative_to(tree).as_posix(): path.read_bytes() for path in sorted(tree.rglob("*")) if path.is_file()}


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
    tokens = [token for token in (release.INSTALL_TOKEN, release.PINS_TOKEN) if token in text]
    assert "raise NotImplementedError()" in text and not tokens, (
        f"the release notebook should hold `raise NotImplementedError()` stubs and no unfilled token, found {tokens}"
    )


def test_student_tree_is_checked(tmp_path):
    tree = release.export_student_tree(REPO, RELEASE, tmp_path / "student", release.student_readme())
    assert sorted(p.name for p in tree.iterdir()) == KIT_FILES, (
        f"the student tree should hold only {KIT_FILES}, got {sorted(p.name for p in tree.iterdir())}"
    )
    leak = tree / "src" / "specdec_kit" / "leak.py"
    leak.write_text(f"# {release.FORBIDDEN_TEXT[0]}\n")
    with pytest.raises(release.ReleaseError, match="leak.py"):
        release.check_student_tree(tree)


@pytest.mark.parametrize("values,key", [
    ({}, "student_repo"),  # the shipped config: the placeholder owner
    ({"student_repo": '"cs999"'}, "student_repo"),  # not owner/name
    ({"student_repo": '"cs999/specdec"', "tag": '""'}, "tag"),
])
def test_publishing_refuses_placeholders(tmp_path, capsys, values, key):
    autograder = write_config(tmp_path, **values)
    argv = ["release", "--autograder", autograder, "--out", str(tmp_path / "out"), "--student-repo",
            str(tmp_path / "student")]
    assert main(argv) == 2, f"release --student-repo with {values or 'the shipped config'} must exit with status 2"
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "config.toml" in err and f"[publish] {key}" in err, (
        f"the refusal should be one line naming config.toml and [publish] {key}, got {err!r}"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "student").exists(), (
        "a refused release should write neither the notebook nor the student tree"
    )


def test_placeholders_are_refused_before_any_work(tmp_path):
    """Nothing heavy (nbformat, nbgrader, the recorded answers' checks) is imported before the refusal."""
    probe = ("import sys\nfrom specdec_course.cli import main\n"
             f"code = main(['release', '--student-repo', {str(tmp_path / 'student')!r}])\n"
             "print(code, sorted(m for m in ('nbformat', 'specdec_course.authoring.answers', 'specdec_kit.checks') "
             "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "2 []", f"the refusal should come first (exit 2, nothing imported): {run.stdout!r}, " \
                                         f"stderr {run.stderr[-500:]!r}"


def test_valid_config_publishes_its_repository_and_tag(tmp_path, capsys, monkeypatch):
    autograder = write_config(tmp_path, student_repo='"cs999/specdec"', tag='"v2.0.1"')
    config = course_config.load_config(tmp_path / "autograder")
    assert course_config.placeholder_problems(config) == [], (
        f"cs999/specdec at v2.0.1 should need nothing set, got {course_config.placeholder_problems(config)}"
    )
    # nbgrader's part and the answers are covered by `release --check`; here the config's path through
    monkeypatch.setattr(release, "render_release", lambda solution, config: course_config.install_spec(config))
    monkeypatch.setattr(answers, "render_answers", lambda solution, autograder: '{"answers": "rendered"}\n')
    monkeypatch.chdir(REPO)
    checkout = {path: path.read_bytes() for path in (RELEASE, REPO / release.STUDENT_ANSWERS)}
    student = tmp_path / "student"
    argv = ["release", "--autograder", autograder, "--student-repo", str(student)]
    code = main(argv)
    printed = capsys.readouterr()
    assert code == 0, f"release --student-repo with a valid config should exit with 0; stderr: {printed.err}"
    assert "created" in printed.out, f"a new folder is created, and said so: {printed.out!r}"
    assert main(argv) == 0 and "updated in place" in capsys.readouterr().out, "a second export updates the first"
    assert {path: path.read_bytes() for path in checkout} == checkout, (
        "an export leaves the checkout's release notebook and answers as they were"
    )
    assert (student / release.STUDENT_ANSWERS).read_text() == '{"answers": "rendered"}\n', "the tree ships the " \
                                                                                          "answers rendered for it"
    notebook, readme = (student / release.NOTEBOOK).read_text(), (student / "README.md").read_text()
    assert notebook == "specdec-kit @ git+https://github.com/cs999/specdec@v2.0.1", (
        f"the notebook's install address should name cs999/specdec at v2.0.1, got {notebook!r}"
    )
    assert "https://colab.research.google.com/github/cs999/specdec/blob/v2.0.1/" in readme, (
        "the student README's Colab link should open cs999/specdec at v2.0.1"
    )


def test_export_updates_a_previous_export_in_place(tmp_path):
    student = tmp_path / "student"
    (student / ".git").mkdir(parents=True)  # a fresh clone of the student repository: nothing but .git
    (student / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    release.export_student_tree(REPO, RELEASE, student, "first README\n")
    (student / "NOTES.md").write_text("instructor's notes\n")
    (student / "src" / "specdec_kit" / "mine.py").write_text("# the instructor's own file\n")
    (student / "src" / "specdec_kit" / "gone").mkdir()
    (student / "src" / "specdec_kit" / "gone" / "old.py").write_text("# a file the kit wrote last time\n")
    with open(student / release.MANIFEST, "a") as manifest:
        manifest.write("src/specdec_kit/gone/old.py\n")

    release.export_student_tree(REPO, RELEASE, student, "second README\n")
    assert (student / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n", ".git/HEAD should be kept unchanged"
    assert (student / "NOTES.md").read_text() == "instructor's notes\n", "NOTES.md should be kept unchanged"
    assert (student / "src" / "specdec_kit" / "mine.py").is_file(), (
        "a file the kit did not write (src/specdec_kit/mine.py) should be kept"
    )
    assert (student / "README.md").read_text() == "second README\n", "README.md should be the second export's"
    assert not (student / "src" / "specdec_kit" / "gone").exists(), (
        "a file the last export listed and this one no longer writes should be removed, with its empty folder"
    )
    listed = (student / release.MANIFEST).read_text()
    assert f"\n{release.NOTEBOOK}\n" in listed and "NOTES.md" not in listed and "old.py" not in listed, (
        f"the manifest should list the notebook and neither NOTES.md nor old.py, got:\n{listed}"
    )


def test_export_refuses_a_directory_that_is_not_an_export(tmp_path, capsys):
    student = tmp_path / "student"
    (student / ".git").mkdir(parents=True)
    (student / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (student / "README.md").write_text("someone else's repository\n")
    before = snapshot(student)
    with pytest.raises(ValueError, match=f"no {release.MANIFEST}.*new or empty directory"):
        release.export_student_tree(REPO, RELEASE, student, "README\n")
    autograder = write_config(tmp_path, student_repo='"cs999/specdec"')
    argv = ["release", "--autograder", autograder, "--out", str(tmp_path / "out"), "--student-repo", str(student)]
    assert main(argv) == 2, "release --student-repo into a directory that is not an export must exit with status 2"
    err = capsys.readouterr().err
    assert "not a previous export" in err, f"the refusal should say the directory is not a previous export: {err!r}"
    assert snapshot(student) == before, f"a refused export should leave every file as it was: {sorted(before)}"
    assert not (tmp_path / "out").exists(), "a refused release should not write the notebook either"


def test_deadline_is_read_with_its_timezone(tmp_path):
    write_config(tmp_path, due='"2026-12-05T23:59:00-08:00"', grace_minutes="15")
    deadline = course_config.load_config(tmp_path / "autograder").deadline
    assert deadline.due.utcoffset() == timedelta(hours=-8) and deadline.grace_minutes == 15, (
        f"the deadline should be due at UTC-8 with 15 grace minutes, got {deadline}"
    )
    shutil.rmtree(tmp_path / "autograder")
    write_config(tmp_path, due='"2026-12-05T23:59:00"')
    with pytest.raises(ValueError, match=r"\[deadline\] due must be .* timezone"):
        course_config.load_config(tmp_path / "autograder")


def test_student_readme_states_the_recorded_run_times(tmp_path):
    seconds = release.run_seconds()
    readme = release.student_readme()
    assert f"| finished, the three bonus parts included | {seconds['finished'][0]} s | {seconds['finished'][1]} s |" \
        in readme, readme
    with pytest.raises(ValueError, match="time-notebook"):
        release.run_seconds(tmp_path / "none.json")


def test_time_notebook_records_one_total_at_a_time(tmp_path):
    from specdec_course.commands.time_notebook import record_time

    path = tmp_path / "times.json"
    for which in ("blank", "finished"):
        for cache, seconds in (("fresh", 20.4), ("warm", 9.6)):
            record_time(path, which, cache, seconds, f"specdec-course time-notebook ({which}, {cache})")
    assert release.run_seconds(path) == {"blank": (20, 10), "finished": (20, 10)}
    record_time(path, "blank", "warm", 7.2, "again")
    assert release.run_seconds(path)["blank"] == (20, 7), "a new measurement replaces its own total only"


def test_release_shows_its_steps_on_stderr_and_says_how_the_total_moved(tmp_path, capsys, monkeypatch):
    """nbgrader and the answers replaced by stand-ins: each release draws its bar of steps on stderr (with what the
    steps print) and prints one line on stdout, which gives the new total and the old where the solution's points
    moved from those of the notebook it replaces (assignment/'s, or the student repository's)."""
    autograder = write_config(tmp_path, student_repo='"cs999/specdec"')
    monkeypatch.setattr(release, "render_release", lambda solution, config: RELEASE.read_text())
    loading = "device cpu, pair tiny"  # what the solution prints as the answers load it: not a result

    def render_answers(solution, autograder):
        print(loading)
        return '{"answers": "rendered"}\n'

    def write_answers(solution, autograder, path):
        render_answers(solution, autograder)
        return tmp_path / "answers.json"

    monkeypatch.setattr(answers, "render_answers", render_answers)
    monkeypatch.setattr(answers, "write_answers", write_answers)
    monkeypatch.chdir(REPO)
    raised = nbformat.read(REPO / "solutions" / release.NOTEBOOK, as_version=4)
    was = notebook_points(raised).total
    next(c for c in raised.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_exact"
         ).metadata["nbgrader"]["points"] += 2
    nbformat.write(raised, tmp_path / "raised.ipynb")
    note = f"the total is now {was + 2:g} points, was {was:g}"

    def run(argv: list[str], steps: str, said: str) -> None:
        assert main(argv) == 0, f"{argv} should succeed"
        printed = capsys.readouterr()
        assert printed.err.startswith("\rrelease") and steps in printed.err, (
            f"{argv}: stderr should hold the bar of its steps, {steps} at the end: {printed.err!r}")
        assert loading in printed.err and len(printed.out.splitlines()) == 1 and said in printed.out, (
            f"{argv}: stdout should be one line saying {said!r}: {printed.out!r}")
        assert (note in printed.out) == (said == note), f"the note only where the total moved: {printed.out!r}"

    student = ["release", "--autograder", autograder, "--student-repo", str(tmp_path / "student")]
    run(student, "3/3", "created")
    run([*student, "--solution", str(tmp_path / "raised.ipynb")], "3/3", note)
    out = ["release", "--autograder", autograder, "--out", str(tmp_path / "out"), "--solution",
           str(tmp_path / "raised.ipynb")]
    run(out, "2/2", "wrote")  # no notebook in --out before: nothing to compare with
    shutil.copy(RELEASE, tmp_path / "out" / release.NOTEBOOK)  # the committed release, at the old total
    run(out, "2/2", note)


def fake_checkout(tmp_path, monkeypatch, installed: bool):
    """A checkout at tmp_path/checkout (its answers "old"), the current folder, whose student package this process
    imports, or (`installed`) imports from a site-packages copy (its answers "installed"); nbgrader and the answers
    replaced by stand-ins. The checkout's answers file and the imported one."""
    from specdec_kit.checks import answers as recorded

    checkout = tmp_path / "checkout"
    ours = checkout / release.STUDENT_ANSWERS
    ours.parent.mkdir(parents=True)
    ours.write_text("old")
    imported = ours
    if installed:
        imported = tmp_path / "lib" / "python3.11" / "site-packages" / "specdec_kit" / "checks" / "answers.json"
        imported.parent.mkdir(parents=True)
        imported.write_text("installed")
    monkeypatch.setattr(recorded, "ANSWERS_FILE", imported)
    monkeypatch.setattr(release, "render_release", lambda solution, config: RELEASE.read_text())
    monkeypatch.setattr(answers, "render_answers", lambda solution, autograder: "rendered")
    monkeypatch.chdir(checkout)
    return ours, imported


def release_argv(tmp_path) -> list[str]:
    return ["release", "--solution", str(REPO / "solutions" / release.NOTEBOOK), "--autograder",
            str(REPO / "autograder"), "--out", str(tmp_path / "out")]


def test_release_writes_the_answers_into_the_checkout(tmp_path, monkeypatch, capsys):
    ours, _ = fake_checkout(tmp_path, monkeypatch, installed=False)
    assert main(release_argv(tmp_path)) == 0, f"a release from its checkout should succeed: {capsys.readouterr()}"
    assert ours.read_text() == "rendered", "the release writes the answers into the checkout's src/specdec_kit"


@pytest.mark.parametrize("check", [False, True])
def test_release_refuses_an_installed_student_package(tmp_path, monkeypatch, capsys, check):
    """The kit imported from site-packages: neither that copy nor the checkout is written, or checked against."""
    ours, imported = fake_checkout(tmp_path, monkeypatch, installed=True)
    code = main(release_argv(tmp_path) + ["--check"] * check)
    err = capsys.readouterr().err
    assert code == 2 and "an installed copy" in err and "pip install -e ." in err, (
        f"release{' --check' * check} should refuse a student package imported from site-packages and say how to "
        f"import the checkout's: exit {code}, {err!r}")
    assert (ours.read_text(), imported.read_text()) == ("old", "installed"), "nothing is written on a refusal"
    assert not (tmp_path / "out").exists(), "the refusal comes before the notebook's release"


def test_release_refuses_a_folder_that_is_no_checkout(tmp_path, monkeypatch, capsys):
    fake_checkout(tmp_path, monkeypatch, installed=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code = main(release_argv(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and "run specdec-course release from the checkout's root" in err, (
        f"release run outside a checkout should say where to run it: exit {code}, {err!r}")
