"""`specdec_kit.core.tracebacks`: a failure shown with the student's frames only, the libraries' folded into one line.

Example run: python -m pytest tests/kit/core/test_tracebacks.py -q
"""

import contextlib
import inspect

import nbformat
import torch

from specdec_kit import checks
from specdec_kit.core import tracebacks

from shell import shell

# A student's cell whose code fails inside a torch module's call.
CELL = ("import torch\n\n"
        "def reshape(x):\n    return x.view(3, 7)\n\n"
        "class Reshaper(torch.nn.Module):\n    def forward(self, x):\n        return reshape(x)\n")


def test_frames_are_named_by_who_wrote_their_code():
    named = {path: tracebacks.library_name(path) for path in (
        inspect.getfile(torch.nn.Module), checks.__file__, contextlib.__file__, "<ipython-input-3-abc>",
        "/tmp/ipykernel_12/3456.py", "<frozen runpy>")}
    assert list(named.values()) == ["torch", "the kit", "other libraries", None, None, "other libraries"], named


def test_render_keeps_the_students_frames_and_names_what_it_folded():
    namespace = {}
    exec(compile(CELL, "<ipython-input-1-abc>", "exec"), namespace)
    try:
        namespace["Reshaper"]()(torch.ones(1))
    except RuntimeError as e:
        lines = "".join(tracebacks.render(e)).splitlines()
    text = "\n".join(lines)
    assert text.count("<ipython-input-1-abc>") == 2 and "torch/nn/" not in text, f"the cell's two frames only:\n{text}"
    assert lines[-2] == "[2 frames of torch folded away]" and lines[-1].startswith("RuntimeError: shape"), text


def test_ipython_shows_a_folded_error_in_its_own_format():
    cells = [CELL, "from specdec_kit import tracebacks\n\ntry:\n    Reshaper()(torch.ones(1))\n"
                   "except RuntimeError as e:\n    raise tracebacks.fold(e)\n"]
    with shell() as run:
        failed = run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]))["cell 1"]
    lines = failed.error_lines()
    frames = [line for line in lines if line.startswith("Cell In[")]
    assert failed.ename == "RuntimeError" and "forward" in frames[-2] and "in reshape" in frames[-1], lines
    library_frames = [line for line in lines if line.startswith("File ")]
    assert not library_frames and lines[-2] == "[2 frames of torch folded away]", "\n".join(lines)


def test_an_exception_that_takes_no_attributes_is_left_as_it_is():
    class Slotted(Exception):
        __slots__ = ()

    error = Slotted("x")
    assert tracebacks.fold(error) is error
