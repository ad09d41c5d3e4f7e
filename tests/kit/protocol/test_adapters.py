"""The seam runs exactly the code it documents: kit and solution cells whole, definitions only from
cells a student added, never test or demo cells; and it fails clearly on a broken notebook."""

import threading

import nbformat
import pytest

from specdec_kit.protocol import adapters
from specdec_kit.protocol.adapters import NotebookError, code_to_run, load_decoder_classes, load_notebook, not_run

from conftest import SOLUTION

GRADED_TEST = {"grade": True, "grade_id": "test_x", "points": 1, "locked": True, "solution": False,
               "schema_version": 3}
SOLUTION_CELL = {"grade": False, "grade_id": "answer", "locked": False, "solution": True, "schema_version": 3}


def write_notebook(tmp_path, cells, name="submission.ipynb"):
    notebook = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / name
    nbformat.write(notebook, path)
    return path


def code(source, nbgrader=None, tags=None):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    if tags:
        cell.metadata["tags"] = tags
    return cell


def test_solution_defines_both_classes():
    classes = load_decoder_classes(SOLUTION)
    assert issubclass(classes["CachedSpeculativeDecoder"], classes["SpeculativeDecoder"]), (
        "the solution's CachedSpeculativeDecoder should be a subclass of its SpeculativeDecoder"
    )


def test_solution_demo_cell_is_not_run():
    labels = [cell.label for cell in code_to_run(nbformat.read(SOLUTION, as_version=4))]
    assert labels == ["setup", "imports", "speculative_decoder", "cached_speculative_decoder",
                      "speculative_sampler", "prompt_lookup_decoder", "adaptive_speculative_decoder"], (
        f"the seam should run the setup, imports and the five decoder cells and no demo cell, got {labels}"
    )


def test_which_cells_run(tmp_path):
    path = write_notebook(tmp_path, [
        code("import math\nSCALE = 2\nran = ['answer']", SOLUTION_CELL),
        code("ran.append('test')\nraise AssertionError('a test cell must not run')", GRADED_TEST),
        code("ran.append('demo')", tags=["demo"]),
        code("%matplotlib inline\n!pip install nothing\nimport os\n"
             "LIMIT = 10\nNAMES = ('a', 'b')\n"
             "def helper(x):\n    return x * SCALE\n"
             "class Extra:\n    pass\n"
             "experiment = helper(3)\nran.append('experiment')\nprint('experiments do not run')"),
    ])
    module = load_notebook(path)
    assert module.ran == ["answer"], "only the solution cell's statements should have run"
    assert module.helper(2) == 4 and module.LIMIT == 10 and module.NAMES == ("a", "b"), (
        "the function and constants a student's cell defines (helper, LIMIT = 10, NAMES = ('a', 'b')) should be kept"
    )
    assert isinstance(module.Extra, type) and module.os.sep, (
        "the class Extra and the `import os` of a student's cell should be kept"
    )
    assert not hasattr(module, "experiment"), "a student's cell should keep only definitions: `experiment` must not run"


def test_missing_class_is_named(tmp_path):
    path = write_notebook(tmp_path, [code("class SpeculativeDecoder:\n    pass", SOLUTION_CELL)])
    with pytest.raises(NotebookError, match="defines no class CachedSpeculativeDecoder"):
        load_decoder_classes(path)


def test_cell_that_raises_is_named(tmp_path):
    path = write_notebook(tmp_path, [code("x = 1 / 0", SOLUTION_CELL)])
    with pytest.raises(NotebookError, match="answer raised ZeroDivisionError"):
        load_notebook(path)


def test_syntax_error_is_named(tmp_path):
    path = write_notebook(tmp_path, [code("def broken(:\n    pass", SOLUTION_CELL)])
    with pytest.raises(NotebookError, match="answer has a syntax error on line 1"):
        load_notebook(path)


def test_malformed_and_missing_notebooks(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{ this is not json")
    with pytest.raises(NotebookError, match="not a readable Jupyter notebook"):
        load_notebook(bad)
    with pytest.raises(NotebookError, match="does not exist"):
        load_notebook(tmp_path / "absent.ipynb")


def test_traceback_shows_the_cells_source(tmp_path):
    path = write_notebook(tmp_path, [code("def f():\n    return undefined_name\nf()", SOLUTION_CELL)])
    with pytest.raises(NotebookError) as info:
        load_notebook(path)
    import traceback

    text = "".join(traceback.format_exception(info.value.__cause__))
    assert "return undefined_name" in text, (
        f"the traceback should show the cell's line 'return undefined_name', got:\n{text}"
    )


def test_parsing_waits_for_another_threads_parse():
    """CPython 3.11's AST converter counts recursion per interpreter, so grading threads that parse at
    once could fail with "AST constructor recursion depth mismatch"; the kit's parses take turns."""
    notebook = nbformat.v4.new_notebook(cells=[code("x = 1\nprint(x)")])
    done = threading.Event()
    worker = threading.Thread(target=lambda: (not_run(notebook), done.set()))
    with adapters._AST_LOCK:  # another thread is mid-parse
        worker.start()
        assert not done.wait(0.3), "not_run parsed while another thread held the AST lock"
    assert done.wait(10), "not_run never finished once the AST lock was free"
    worker.join()
