"""A failure in a notebook's test or demo cell, shown with the student's own frames only.

    error._render_traceback_ = partial(render, error)   # IPython (Jupyter, Colab) shows the error this way

IPython asks an exception for `_render_traceback_()` before formatting it itself, so this works in any kernel without
touching `sys.excepthook` or IPython's settings. `render` keeps the frames in the notebook's cells (and the student's
own files), folds away those of the kit, torch, transformers, the standard library and anything installed, says in
one line that it did, and lets IPython format what is left as it would any traceback. The kit's own exceptions
(`CheckFailed`, `CheckTimeout`, `NoProgress`, `NotReadyError`) carry the method; the checks' local runner adds it to a
student's exception that comes out of their code.
"""

from __future__ import annotations

import sys
import sysconfig
import traceback
from functools import cache
from pathlib import Path
from types import TracebackType

KIT = Path(__file__).resolve().parents[1]  # the package, above core/
# Libraries named in the note, by the top-level package of their files.
NAMED = {"specdec_kit": "the kit", "torch": "torch", "transformers": "transformers"}


@cache
def _library_roots() -> tuple[tuple[Path, str | None], ...]:
    """(folder, the name of what it holds, or None to name it by its top-level package), the most specific first."""
    roots = [(KIT, "the kit")]
    for name in ("torch", "transformers"):  # however they were installed
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.append((Path(module.__file__).resolve().parent, NAMED[name]))
    paths = sysconfig.get_paths()
    roots += [(Path(paths[key]).resolve(), None) for key in ("purelib", "platlib", "stdlib", "platstdlib")]
    return tuple(roots)


def library_name(filename: str) -> str | None:
    """Who wrote the code of a frame in `filename`: a library's name (as the note words it), or None for the
    student's own code (a notebook cell, whose file name IPython makes up, or a file of theirs)."""
    if filename.startswith("<") and not filename.startswith("<frozen"):
        return None  # a cell: <ipython-input-...>, or the seam's "<... cell>"
    path = Path(filename).resolve()
    if not filename.startswith("<") and not path.is_file():  # ipykernel names a cell's code after no real file
        return None
    for root, name in _library_roots():
        if path.is_relative_to(root):
            return name or NAMED.get(path.relative_to(root).parts[0], "other libraries")
    return "other libraries" if filename.startswith("<frozen") else None


def student_traceback(tb: TracebackType | None, first_only: bool = False) -> tuple[TracebackType | None, list[str]]:
    """(a traceback of the student's frames of `tb` alone, whose code each left-out frame is: a library's name or
    "your code"); `first_only` keeps only the outermost student frame (the cell that was run). IPython's own frames,
    which run every cell, are left out unnamed."""
    kept, folded = [], []
    while tb is not None:
        frame = tb.tb_frame
        library = library_name(frame.f_code.co_filename)
        if library is None and not (first_only and kept):
            kept.append(tb)
        elif library is None:
            folded.append("your code")
        elif not frame.f_globals.get("__name__", "").startswith(("IPython.", "ipykernel.")):
            folded.append(library)
        tb = tb.tb_next
    chain = None
    for entry in reversed(kept):
        chain = TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain, folded


def fold_note(folded: list[str], why: str = "") -> str:
    if not folded:
        return ""
    names = list(dict.fromkeys(folded))
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"[{len(folded)} frame{'s' * (len(folded) != 1)} of {who} folded away{why}]"


def render(error: BaseException, first_only: bool = False, why: str = "") -> list[str]:
    """`error`'s traceback as IPython shows it (a list of strings, one a frame), with the student's frames alone and a
    note on what was folded just above its last line. The exception's chain (`raise ... from`) is left out: the
    message names what the student needs of it."""
    tb, folded = student_traceback(error.__traceback__, first_only)
    note = fold_note(folded, why)
    cause, context, suppress = error.__cause__, error.__context__, error.__suppress_context__
    error.__cause__, error.__context__, error.__suppress_context__ = None, None, True
    try:
        shell = ipython_shell()
        if shell is not None:
            lines = list(shell.InteractiveTB.structured_traceback(type(error), error, tb, tb_offset=0))
        else:  # the same, as plain Python prints it: lines that end with a newline
            lines, note = traceback.format_exception(type(error), error, tb), note and note + "\n"
    finally:
        error.__cause__, error.__context__, error.__suppress_context__ = cause, context, suppress
    return [*lines[:-1], note, lines[-1]] if note else lines


def fold(error: BaseException, first_only: bool = False, why: str = "") -> BaseException:
    """`error`, set to show only the student's frames in IPython (an exception that takes no attributes is left as
    it is)."""
    try:
        error._render_traceback_ = lambda: render(error, first_only, why)
    except (AttributeError, TypeError):
        pass
    return error


def ipython_shell():
    """The running IPython shell (Jupyter, Colab), or None outside one; IPython is never imported for it."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None
