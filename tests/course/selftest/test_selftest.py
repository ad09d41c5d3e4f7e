"""`specdec-course selftest` through the whole pipeline (nbgrader, the sandbox, the verdict) on the solution, the blank
release and one catalogued bug: each row as the catalogue says. Marked release: `make test-release` runs it, then the
whole catalogue (`make selftest`); CI grades the same pipeline in tests/test_corpora.py and test_batch.py.

Example run: python -m pytest tests/course/selftest/test_selftest.py -q
"""

import pytest

from specdec_course.cli import main

from conftest import REPO


@pytest.mark.slow  # three notebooks graded, two at a time: about two minutes on 2 cores
@pytest.mark.release
def test_selftest_grades_the_solution_the_blank_release_and_an_entry_as_the_catalogue_says(tmp_path, capsys):
    code = main(["selftest", "--jobs", "2", "--only", "no_bonus_token", "--workdir", str(tmp_path / "selftest"),
                 "--solution", str(REPO / "solutions" / "speculative_decoding.ipynb"),
                 "--release", str(REPO / "assignment" / "speculative_decoding.ipynb"),
                 "--autograder", str(REPO / "autograder")])
    printed = capsys.readouterr().out
    assert code == 0 and "3/3 submissions graded as expected" in printed, printed[-3000:]
