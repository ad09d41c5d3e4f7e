"""The tests mirror src/: a module's tests are in the test file of its name in its room's folder
(`specdec_course/grading/leaks.py`: `tests/course/grading/test_leaks.py`, `specdec_kit/core/timing.py`:
`tests/kit/core/test_timing.py`), or it is listed in TESTED_ELSEWHERE with the test files that test it, each of
which names it (its dotted path, its name as a word, its command's name, or a function or class it defines whose
name is distinctive: eight characters or more). A new module without either fails here,
as does a listed file that no longer names the module, or a listing for a module that has a test file of its own.

Example run: python -m pytest tests/test_mirror.py -q
"""

import ast
import re

from conftest import REPO

SRC, TESTS = REPO / "src", REPO / "tests"
# module (under src/) -> test files (under tests/) that test it, for the modules without a test file of their name.
TESTED_ELSEWHERE = {
    "specdec_course/authoring/answers.py": ["course/authoring/test_release.py"],
    "specdec_course/authoring/notebooks.py": ["course/test_cli.py"],
    "specdec_course/commands/adaptive.py": ["course/bench/test_adaptive.py"],
    "specdec_course/commands/autograde.py": ["course/grading/test_batch.py", "course/test_cli.py", "test_corpora.py"],
    "specdec_course/commands/autograde_one.py": ["course/platforms/test_gradescope.py"],
    "specdec_course/commands/bench.py": ["test_commands.py", "course/bench/test_hf_methods.py"],
    "specdec_course/commands/build_notebook.py": ["course/test_cli.py"],
    "specdec_course/commands/catalogue.py": ["course/selftest/test_catalogue.py", "test_commands.py"],
    "specdec_course/commands/export.py": ["test_commands.py", "course/test_cli.py", "test_corpora.py"],
    "specdec_course/commands/feedback.py": ["course/grading/test_feedback.py"],
    "specdec_course/commands/gradescope.py": ["course/platforms/test_gradescope.py"],
    "specdec_course/commands/merge.py": ["course/platforms/test_gradescope.py"],
    "specdec_course/commands/options.py": ["course/test_cli.py"],
    "specdec_course/commands/release.py": ["course/authoring/test_release.py"],
    "specdec_course/commands/report.py": ["course/platforms/test_report.py"],
    "specdec_course/commands/selftest.py": ["course/selftest/test_selftest.py"],
    "specdec_course/commands/time_notebook.py": ["course/authoring/test_release.py"],
    "specdec_course/core/pins.py": ["kit/test_environment.py", "course/authoring/test_student_distribution.py"],
    "specdec_course/core/regular_files.py": ["course/grading/test_batch.py"],
    "specdec_course/grading/budget.py": ["course/grading/test_verdict.py"],
    "specdec_course/grading/cell_watch.py": ["course/grading/test_preprocessors.py"],
    "specdec_course/grading/gradebook.py": ["course/grading/test_batch.py", "test_corpora.py"],
    "specdec_course/grading/notebook_run.py": ["course/grading/test_batch.py", "course/grading/test_row.py"],
    "specdec_course/grading/results.py": ["course/grading/test_collect.py", "course/grading/test_batch.py"],
    "specdec_course/grading/safe_nbconvert.py": ["course/grading/test_safe_html.py"],
    "specdec_course/grading/speed.py": ["course/grading/test_verdict.py"],
    "specdec_course/platforms/similarity.py": ["course/platforms/test_report.py"],
    "specdec_course/sandbox/baseline.py": ["course/sandbox/test_models.py"],
    "specdec_course/sandbox/channel.py": ["course/sandbox/test_child.py", "course/sandbox/test_host.py"],
    "specdec_course/sandbox/enter.py": ["course/sandbox/test_processes.py"],
    "specdec_course/sandbox/host_main.py": ["course/sandbox/test_host.py"],
    "specdec_course/sandbox/kernel.py": ["course/sandbox/test_box.py"],
    "specdec_course/sandbox/timing_gate.py": ["course/grading/test_verdict.py"],
    "specdec_course/sandbox/uids.py": ["course/sandbox/test_box.py"],
    "specdec_course/selftest/losses.py": ["course/selftest/test_catalogue.py", "course/selftest/test_record.py"],
    "specdec_course/selftest/student_run.py": ["course/selftest/test_student_path.py"],
    "specdec_kit/bench/benchmark.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/demo.py": ["kit/test_cli.py", "kit/bench/test_bench.py"],
    "specdec_kit/bench/figures.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/machine.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/plot.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/readiness.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/runners.py": ["kit/bench/test_bench.py"],
    "specdec_kit/bench/sweeps.py": ["kit/bench/test_bench.py"],
    "specdec_kit/checks/adaptive.py": ["course/bench/test_adaptive.py"],
    "specdec_kit/checks/answers.py": ["course/authoring/test_release.py"],
    "specdec_kit/checks/caching.py": ["kit/checks/test_checks.py"],
    "specdec_kit/checks/core.py": ["kit/checks/test_checks.py"],
    "specdec_kit/checks/decoding.py": ["kit/checks/test_checks.py", "course/core/test_oracle.py"],
    "specdec_kit/checks/failure.py": ["kit/checks/test_outcomes.py"],
    "specdec_kit/checks/speed.py": ["kit/checks/test_checks.py"],
    "specdec_kit/checks/steps.py": ["kit/checks/test_checks.py"],
    "specdec_kit/core/no_progress.py": ["kit/test_errors.py", "kit/rounds/test_rounds.py"],
    "specdec_kit/core/result.py": ["kit/bench/test_bench.py"],
    "specdec_kit/core/sampling.py": ["kit/checks/test_sampling.py"],
    "specdec_kit/core/settings.py": ["course/sandbox/test_child.py", "course/grading/test_verdict.py"],
    "specdec_kit/core/theory.py": ["kit/bench/test_bench.py"],
    "specdec_kit/models/baseline.py": ["kit/rounds/test_rounds.py", "kit/checks/test_sampling.py"],
    "specdec_kit/moved.py": ["test_layers.py"],
    "specdec_kit/protocol/probes.py": ["kit/checks/test_outcomes.py", "kit/checks/test_checks.py"],
    "specdec_kit/protocol/remote.py": ["course/sandbox/test_models.py"],
    "specdec_kit/rounds/expected.py": ["kit/rounds/test_rounds.py"],
    "specdec_kit/rounds/record.py": ["kit/rounds/test_rounds.py"],
    "specdec_kit/rounds/view.py": ["kit/rounds/test_rounds.py"],
    "specdec_kit/zoo/models.py": ["kit/zoo/test_zoo.py"],
    "specdec_kit/zoo/tables.py": ["kit/zoo/test_zoo.py"],
    "specdec_kit/zoo/tokenizer.py": ["kit/models/test_loading.py", "kit/models/test_gguf.py"],
}


def modules() -> list[str]:
    return sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "__init__.py")


MIRROR = {"specdec_kit": "kit", "specdec_course": "course"}  # a package's folder under tests/


def own_test_file(module: str) -> bool:
    """Whether `module` has the test file of its place: `specdec_kit/core/timing.py`: `kit/core/test_timing.py`."""
    package, *rest = module.split("/")
    return (TESTS / MIRROR[package] / "/".join(rest[:-1]) / f"test_{rest[-1]}").is_file()


def defined_names(module: str) -> list[str]:
    """The distinctive names `module` defines at its top level: its public functions and classes of 8 characters or
    more (`run`, `main` would be found anywhere)."""
    tree = ast.parse((SRC / module).read_text())
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and not node.name.startswith("_") and len(node.name) >= 8]


def names_module(text: str, module: str) -> bool:
    """Whether a test file's text names `module`: its dotted path, its name as a word, its command's name, or a
    distinctive name it defines."""
    dotted = module.removesuffix(".py").replace("/", ".")
    stem = dotted.rsplit(".", 1)[-1]
    forms = [re.escape(dotted.split(".", 1)[1]), rf"\b{stem}\b", rf"\b{stem.replace('_', '-')}\b",
             *(rf"\b{name}\b" for name in defined_names(module))]
    return any(re.search(form, text) for form in forms)


def test_every_module_has_a_test_file_of_its_name_or_is_listed():
    unlisted = [m for m in modules() if not own_test_file(m) and m not in TESTED_ELSEWHERE]
    assert not unlisted, (f"modules without tests/.../test_<name>.py, not in TESTED_ELSEWHERE: {unlisted}; write "
                          "the test file, or list the test files that test each")


def test_every_listing_is_of_a_module_without_its_own_test_file_and_names_real_tests():
    stale = [m for m in TESTED_ELSEWHERE if m not in modules() or own_test_file(m)]
    assert not stale, f"TESTED_ELSEWHERE lists modules gone or with a test file of their own: {stale}"
    wrong = {m: t for m, files in TESTED_ELSEWHERE.items() for t in files
             if not (TESTS / t).is_file() or not names_module((TESTS / t).read_text(), m)}
    assert not wrong, f"listed test files missing, or not naming their module: {wrong}"
