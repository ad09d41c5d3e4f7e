"""Grading replays a notebook's definitions only (`replay.run_definitions`): a correct notebook, however its
cells build their state, gets no note of an error its own run did not have, and a definition that really fails
is still reported.

Each notebook here is written as a student writes it (nbformat, with the execution counts of the student's run),
checked to run cleanly in that order, then replayed from the cells grading takes (`adapters.cells_to_consider`).

Example run: python -m pytest tests/kit/protocol/test_replay.py -q
"""

import re

import nbformat
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specdec_kit.protocol.adapters import cells_to_consider, not_run
from specdec_kit.protocol.replay import run_definitions

# a shared 2-core machine: no per-example deadline; many generated notebooks use a class before a cell defines it
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def notebook_of(*cells: str, order: list[int] | None = None) -> nbformat.NotebookNode:
    """Code cells of `cells`, run by the student in `order` (cell positions, first run first; notebook order by
    default): each cell's execution count says when it ran."""
    order = list(range(len(cells))) if order is None else order
    counts = {position: count for count, position in enumerate(order, start=1)}
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, execution_count=counts[position])
                                           for position, source in enumerate(cells)])


def student_run(notebook: nbformat.NotebookNode) -> dict:
    """The notebook's cells run as the student ran them, in the order of their execution counts."""
    namespace = {}
    for cell in sorted(notebook.cells, key=lambda cell: cell.execution_count):
        exec(compile(cell.source, f"<cell {cell.execution_count}>", "exec"), namespace)
    return namespace


def replay(notebook: nbformat.NotebookNode):
    """What grading's child defines from `notebook`, and the problems it reports."""
    return run_definitions([(label, source) for _, label, source, _ in cells_to_consider(notebook)])


def test_an_item_assigned_after_a_computed_value_is_not_replayed():
    """A verbose notebook's experiment: the tensor is made by a call (not replayed), then one item is set."""
    notebook = notebook_of("import torch",
                           "toy_logits = torch.zeros(1, 8)\ntoy_logits[0, 5] = 3.0\nbest = int(toy_logits.argmax())",
                           "class Decoder:\n    def pick(self, logits):\n        return int(logits.argmax())")
    assert student_run(notebook)["best"] == 5
    module, problems = replay(notebook)
    assert problems == [], f"a cell whose own run worked must get no load note; got {problems}"
    assert isinstance(module.Decoder, type), "the class after the experiment must still be defined"
    assert "cell 1, line 2: toy_logits[0, 5] = 3.0" in not_run(notebook), (
        f"the item assignment is listed among the statements grading does not run; got {not_run(notebook)}"
    )


def test_an_item_of_a_constant_set_later_is_not_replayed():
    notebook = notebook_of("WEIGHTS = [0.0, 0.0]", "WEIGHTS[1] = 3.0")
    module, problems = replay(notebook)
    assert problems == [] and module.WEIGHTS == [0.0, 0.0], (
        f"grading keeps a constant as it was first given and reports nothing; got {module.WEIGHTS}, {problems}"
    )


def test_a_constant_changed_in_place_by_a_later_cell_is_kept_as_defined():
    notebook = notebook_of("ROLES = ['draft', 'target']",
                           "class Decoder:\n    def roles(self):\n        return list(ROLES)",
                           "ROLES.append('bonus')\nROLES[0] = 'small'\nDecoder.extra = 1")
    student_run(notebook)
    module, problems = replay(notebook)
    assert problems == [], f"changing a constant in place must not bring a load note; got {problems}"
    assert module.Decoder().roles() == ["draft", "target"] and not hasattr(module.Decoder, "extra"), (
        "the constant keeps the value it was defined with, and the class gets no attribute set from outside it"
    )


def test_augmented_assignments_are_not_replayed():
    notebook = notebook_of("STEPS = 4\ncount = len('abc')", "STEPS += 1\ncount += 1\ntotal = 0\ntotal += count")
    student_run(notebook)
    module, problems = replay(notebook)
    assert problems == [] and module.STEPS == 4 and module.total == 0, (
        f"`x += ...` changes a value rather than defining one: not replayed, not reported; got {problems}"
    )
    assert "cell 1, line 2: count += 1" in not_run(notebook), not_run(notebook)


def test_cells_run_out_of_order_define_their_classes():
    """The student ran the last cell first: the subclass and the class body's constant come from a cell below."""
    notebook = notebook_of("class CachedDecoder(Decoder):\n    k = DEFAULT_K",
                           "trials = [k for k in range(3)]",
                           "DEFAULT_K = 4\nclass Decoder:\n    k = 1",
                           order=[2, 1, 0])
    student_run(notebook)
    module, problems = replay(notebook)
    assert problems == [], f"a class whose base a cell below defines must not bring a load note; got {problems}"
    assert issubclass(module.CachedDecoder, module.Decoder) and module.CachedDecoder.k == 4, (
        "CachedDecoder should subclass Decoder and take DEFAULT_K = 4, as in the student's run"
    )


def test_a_class_redefined_in_a_later_cell_wins():
    notebook = notebook_of("class Decoder:\n    version = 1",
                           "class Decoder(Base):\n    version = 2",
                           "class Base:\n    pass",
                           "class Decoder(Base):\n    version = 3",
                           order=[0, 2, 1, 3])
    student_run(notebook)
    module, problems = replay(notebook)
    assert problems == [] and module.Decoder.version == 3, (
        f"the notebook's last definition of Decoder is the one graded, even after another is run again; "
        f"got version {module.Decoder.version}, problems {problems}"
    )


def test_an_import_of_a_missing_module_is_reported():
    notebook = notebook_of("import specdec_no_such_module as helpers",
                           "class Decoder(helpers.Base):\n    pass")
    module, problems = replay(notebook)
    assert problems == ["cell 0, line 1 raised ModuleNotFoundError: No module named 'specdec_no_such_module'",
                        "cell 1, line 1 raised NameError: name 'helpers' is not defined"], problems
    assert not hasattr(module, "Decoder")


def test_a_name_defined_nowhere_is_reported():
    _, problems = replay(notebook_of("class Decoder:\n    k = DEFAULT_K"))
    assert problems == ["cell 0, line 1 raised NameError: name 'DEFAULT_K' is not defined"], problems


def test_a_class_that_needs_state_grading_does_not_rebuild_is_explained():
    """The class cannot be defined without the experiment: said in grading's words, not as the student's error."""
    notebook = notebook_of("import torch\ntoy_logits = torch.zeros(1, 8)",
                           "ROLES = ['draft']\nROLES.append('target')",
                           "class Decoder:\n    row = toy_logits[0]",
                           "class Table:\n    last = ROLES[1]")
    student_run(notebook)
    _, problems = replay(notebook)
    assert problems == [
        "cell 2, line 1 could not be defined for grading (NameError): it uses 'toy_logits' as it is defined, and "
        "grading does not run the statements that set or change 'toy_logits'",
        "cell 3, line 1 could not be defined for grading (IndexError): it uses 'ROLES' as it is defined, and "
        "grading does not run the statements that set or change 'ROLES'",
    ], problems


def test_a_function_that_needs_such_state_is_named_only_if_the_code_uses_it():
    notebook = notebook_of("n_prompts = len(['a', 'b'])",
                           "def plot(values, n=n_prompts):\n    return values[:n]",
                           "def scale(x, n=n_prompts):\n    return x * n",
                           "class Decoder:\n    def step(self, x):\n        return scale(x)")
    student_run(notebook)
    _, problems = replay(notebook)
    assert problems == ["cell 2, line 1 could not be defined for grading (NameError): it uses 'n_prompts' as it "
                        "is defined, and grading does not run the statements that set or change 'n_prompts'"], (
        f"only scale, which Decoder calls, is worth a note; plot is used by nothing replayed; got {problems}"
    )


# A notebook's statements over two names: constants and computed values, changed in every way a notebook changes
# them, read as a class or function is defined and when it is called.
STATEMENTS = ["{x} = [1, 2]", "{x} = list(range(1, 3))", "{x}[0] = 7", "{x} += [3]", "{x}.append(4)", "repr({x})",
              "class C_{x}:\n    first = {x}[0]", "class D_{x}(C_{x}):\n    pass", "def f_{x}(v={x}):\n    return v",
              "def g_{x}():\n    return {x}[-1]", "g_{x}()", "C_{x}.extra = 5"]
STATEMENT = st.builds(lambda template, x: template.format(x=x), st.sampled_from(STATEMENTS), st.sampled_from("ab"))
CELLS = st.lists(st.lists(STATEMENT, min_size=1, max_size=3), min_size=1, max_size=5)


@st.composite
def runs(draw) -> tuple[list[str], list[int]]:
    """Cells and the order the student ran them in; the cell run first starts by giving both names a value."""
    cells = draw(CELLS)
    order = draw(st.permutations(range(len(cells))))
    cells[order[0]] = [draw(st.sampled_from(STATEMENTS[:2])).format(x=x) for x in "ab"] + cells[order[0]]
    return ["\n".join(cell) for cell in cells], list(order)


NAME_ERROR = re.compile(r"raised NameError: name '(\w+)'")


def bound_somewhere(notebook: nbformat.NotebookNode) -> set[str]:
    """The names the generated notebook's cells give a value: `x = ...`, `def f`, `class C`."""
    return {defined or assigned for cell in notebook.cells
            for defined, assigned in re.findall(r"^(?:class|def) (\w+)|^(\w+) =", cell.source, flags=re.MULTILINE)}


@PROPERTY
@given(run=runs())
def test_a_notebook_that_ran_cleanly_gets_no_note_of_an_error_it_did_not_have(run):
    cells, order = run
    notebook = notebook_of(*cells, order=order)
    try:
        student_run(notebook)
    except Exception:
        assume(False)  # the student's own run failed: not a correct notebook
    _, problems = replay(notebook)
    names = bound_somewhere(notebook)
    missing = [problem for problem in problems if (found := NAME_ERROR.search(problem)) and found[1] in names]
    assert not missing, f"a NameError on a name the notebook defines is the replay's, not the student's: {missing}"
    if order == sorted(order):  # run top to bottom, as the grading kernel runs it
        raised = [problem for problem in problems if " raised " in problem]
        assert not raised, f"a notebook that ran cleanly top to bottom must get no note of an error; got {raised}"
