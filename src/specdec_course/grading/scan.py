"""Static scan of a submitted notebook for code that reaches into the grading kit or the grader.

    import nbformat
    from .scan import scan_notebook
    for flag in scan_notebook(nbformat.read("submitted/alice.ipynb", as_version=4)):
        print(flag)  # speculative_decoder, line 12: changes specdec_kit.checks.check_exact (the grading kit's code)

The scan is advisory: it reads the code with `ast` and never runs it, a person reads the flags (the `flags`
column of grades.csv and the staff copy of the feedback), and no score changes because of them. It looks for
- writes (assignment, `del`, `setattr`/`delattr`, `mock.patch`) to the kit's modules and what they export,
  and to the clocks and calls the kit measures with: attributes of `time`, `torch`, `torch.cuda`,
  `torch.Tensor` and `torch.nn.Module`;
- imports of the instructors' `autograder` or `solutions` packages, and text naming their files;
- `sys.modules`, `builtins`, `gc`, `ctypes`, `os._exit`, `importlib.reload`, `exec`/`eval`;
- frame and code inspection (`inspect`, `sys._getframe`, `sys.settrace`, `f_back`, `__globals__`, ...);
- forward hooks and the kit's forward counter (`_forward_hooks`, `register_forward_hook`, `ForwardRecorder`);
- paths outside the submission's folder (absolute, `~` or `..` paths given to `open`, `Path`, `os`, `glob`,
  `shutil`), `os.chdir`, the home folder and `Path.cwd().parent`;
- delegation: a call that hands decoding to a library's speculative decoding (transformers' assisted
  generation or prompt lookup, by their arguments), which a graded method must do itself;
- shell escapes and magics (`!cmd`, `%%bash`, `%run`): they run in the kernel, and the scan cannot read them.
Names are resolved through the notebook's imports (`import specdec_kit.checks as c` makes `c.x` mean
`specdec_kit.checks.x`) and simple aliases (`c2 = c`), across all cells. Magics and shell lines are flagged,
not scanned; neither are the hidden-test regions of graded test cells, which are the instructors' own text and
which nbgrader restores from the source when it grades.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable

import nbformat

from specdec_kit.protocol.adapters import blank_magics, is_test_cell, parse_python

from ..core.nbgrader_course import blank_hidden_tests

KIT = "specdec_kit"
# Dotted names (a name and everything under it) flagged wherever they are used.
MODULE_USES = {
    "autograder": "the instructors' hidden checks",
    "specdec_course": "the instructor package (the grader and its oracle), which students never receive",
    "solutions": "the reference solution",
    "sys.modules": "every loaded module, the kit's included",
    "builtins": "Python's built-in functions",
    "gc": "finds any live object, the grader's included",
    "inspect": "frame and code inspection",
    "sys._getframe": "frame inspection",
    "sys.settrace": "traces every call",
    "sys.setprofile": "traces every call",
    "os._exit": "ends the process before the checks report",
    "importlib.reload": "re-runs a module, the kit's included",
    "os.chdir": "moves the working folder",
    "os.path.expanduser": "the home folder",
    "Path.home": "the home folder",
    "torch.nn.modules.module": "torch's global forward hooks",
}
IMPORT_USES = {**MODULE_USES, "ctypes": "raw memory access"}  # ctypes only when imported: its uses add nothing
# Attribute and variable names flagged on any object.
NAME_USES = {
    "__builtins__": "Python's built-in functions",
    **dict.fromkeys(("f_back", "f_globals", "f_locals", "tb_frame", "gi_frame"), "frame inspection"),
    **dict.fromkeys(("__code__", "__globals__", "__closure__"), "code inspection"),
    **dict.fromkeys(("_forward_hooks", "_forward_pre_hooks", "_global_forward_hooks", "register_forward_hook",
                     "register_forward_pre_hook"), "forward hooks, which the kit counts calls with"),
    "ForwardRecorder": "the kit's forward counter",
}
# Modules and classes whose direct attributes are flagged when written: the kit times and counts through them.
REPLACED = {
    "time": "the clock the kit times with",
    **dict.fromkeys(("torch", "torch.cuda", "torch.Tensor", "torch.nn.Module"), "torch, which the kit times through"),
}
FILE_TEXT = {
    "autograder/": "the instructors' folder",
    "solutions/": "the reference solution's folder",
    "hidden.py": "the hidden checks",
    "gradebook": "nbgrader's gradebook",
    "grades.csv": "the grades",
}
PATH_CALLS = ("open", "Path", "os.listdir", "os.walk", "os.scandir", "glob.glob", "os.remove", "os.unlink",
              "os.chdir", "shutil")
RUN_STRINGS = ("exec", "eval")
# Keyword arguments that make transformers' generate() do speculative decoding itself.
DELEGATION = ("assistant_model", "assistant_tokenizer", "prompt_lookup_num_tokens", "num_assistant_tokens")
IMPORT_CALLS = ("__import__", "importlib.import_module")


def scan_notebook(notebook: nbformat.NotebookNode) -> list[str]:
    """The flags of every code cell, in cell order then line; names imported in one cell count in all."""
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        nbgrader = cell.metadata.get("nbgrader", {})
        source = blank_hidden_tests(cell.source) if is_test_cell(cell) else cell.source
        label = nbgrader.get("grade_id") or f"cell {index}"
        cells.append((label, _parse(blank_magics(source)), _shell_lines(source)))
    names = _bindings([tree for _, tree, _ in cells if tree is not None])
    flags = []
    for label, tree, shell in cells:
        flags += _cell_flags(tree, label, names)
        flags += [f"{label}, line {line}: runs {text[:60]!r} (a shell line or magic: not scanned)"
                  for line, text in shell]
    return list(dict.fromkeys(flags))


def _shell_lines(source: str) -> list[tuple[int, str]]:
    """The lines `adapters.blank_magics` blanks (shell escapes and magics), numbered from 1."""
    return [(number, line.strip()) for number, line in enumerate(source.splitlines(), 1)
            if line.lstrip().startswith(("%", "!"))]


def scan_source(source: str, label: str) -> list[str]:
    """The flags of one cell's source, its names resolved through its own imports only."""
    tree = _parse(blank_magics(source))
    return _cell_flags(tree, label, _bindings([tree] if tree is not None else []))


def _cell_flags(tree: ast.Module | None, label: str, names: dict[str, str]) -> list[str]:
    if tree is None:
        return [f"{label}: syntax error, not scanned"]
    scanner = _Scanner(names)
    scanner.visit(tree)
    found = sorted(dict.fromkeys(scanner.found), key=lambda flag: flag[0])  # stable: first seen first on a line
    return [f"{label}, line {line}: {what}" for line, what in found]


def _parse(source: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():  # the student's own warnings (invalid escapes) are not the scan's to show
            warnings.simplefilter("ignore")
            return parse_python(source)
    except (SyntaxError, ValueError):  # ValueError: null bytes in the source
        return None


def _bindings(trees: list[ast.Module]) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from imports and aliases of imported names."""
    binder = _Binder()
    for tree in trees:
        binder.visit(tree)
    return binder.names


def _bound_names(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """What an import binds: `import a.b` binds a to a, `import a.b as c` c to a.b, `from a import b` b to a.b."""
    if isinstance(node, ast.Import):
        return {alias.asname or _top(alias.name): alias.name if alias.asname else _top(alias.name)
                for alias in node.names}
    module = "." * node.level + (node.module or "")
    return {alias.asname or alias.name: f"{module}.{alias.name}" for alias in node.names}


def _top(module: str) -> str:
    return module.split(".")[0]


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = "." * node.level + (node.module or "")
    return [f"{module}.{alias.name}" for alias in node.names]


def _dotted(node: ast.expr, names: dict[str, str], imported_only: bool = False) -> str | None:
    """`a.b.c` as text with `a` resolved through `names`; None for other expressions, or, with
    `imported_only`, when `a` is not an imported name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or (imported_only and node.id not in names):
        return None
    root = names.get(node.id, node.id)
    return ".".join([root, *reversed(parts)]).removeprefix("pathlib.")  # Path(...) however it was imported


def _matching(dotted: str, names: Iterable[str]) -> str | None:
    """The one of `names` that is `dotted` or one of its parents."""
    return next((name for name in names if dotted == name or dotted.startswith(name + ".")), None)


def _text(node: ast.expr) -> str | None:
    """A string literal's text; an f-string's with `{}` for each replacement."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def _is_outside(path: str) -> bool:
    return path.startswith(("/", "~")) or ".." in re.split(r"[\\/]", path)


def _write_reason(dotted: str) -> str | None:
    """Why writing to `dotted` (an attribute) deserves a look, or None."""
    if _top(dotted) == KIT:
        return "the grading kit's code"
    return REPLACED.get(dotted.rpartition(".")[0])


def _write_targets(target: ast.expr) -> list[ast.expr]:
    """The attributes and items a target writes to, through tuple and starred targets."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [node for element in target.elts for node in _write_targets(element)]
    if isinstance(target, ast.Starred):
        return _write_targets(target.value)
    if isinstance(target, ast.Subscript):
        return [target.value]  # checks.__dict__["x"] = ... writes into checks.__dict__
    return [target] if isinstance(target, ast.Attribute) else []


class _Binder(ast.NodeVisitor):
    """Collects `_bound_names` of every import and `alias = imported.name` assignment, in source order."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(_bound_names(node))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.names.update(_bound_names(node))

    def visit_Assign(self, node: ast.Assign) -> None:
        origin = _dotted(node.value, self.names, imported_only=True)
        if origin:
            self.names.update({target.id: origin for target in node.targets if isinstance(target, ast.Name)})
        self.generic_visit(node)


class _Scanner(ast.NodeVisitor):
    """Collects (line, what) for each thing the module docstring lists."""

    def __init__(self, names: dict[str, str]):
        self.names = names
        self.found: list[tuple[int, str]] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((node.lineno, what))

    def flag_import(self, node: ast.AST, module: str) -> None:
        key = _matching(module, IMPORT_USES)
        if key:
            self.flag(node, f"imports {key} ({IMPORT_USES[key]})")
        for part in module.split("."):
            if part in NAME_USES:
                self.flag(node, f"imports {part} ({NAME_USES[part]})")

    def flag_write(self, node: ast.AST, dotted: str | None) -> None:
        reason = _write_reason(dotted) if dotted else None
        if reason:
            self.flag(node, f"changes {dotted} ({reason})")

    def flag_use(self, node: ast.expr, name: str) -> None:
        if name in NAME_USES:
            self.flag(node, f"uses {name} ({NAME_USES[name]})")
        key = _matching(_dotted(node, self.names, imported_only=True) or "", MODULE_USES)
        if key:
            self.flag(node, f"uses {key} ({MODULE_USES[key]})")

    def visit_Import(self, node: ast.Import) -> None:
        for module in _imported_modules(node):
            self.flag_import(node, module)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for module in _imported_modules(node):
            self.flag_import(node, module)

    def visit_Name(self, node: ast.Name) -> None:
        self.flag_use(node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.flag_use(node, node.attr)
        if node.attr in ("parent", "parents") and isinstance(node.value, ast.Call) \
                and _dotted(node.value.func, self.names) == "Path.cwd":
            self.flag(node, f"uses Path.cwd().{node.attr} (the folder above the submission)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            for text, where in FILE_TEXT.items():
                if text in node.value:
                    self.flag(node, f"mentions {text!r} ({where})")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.visit_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.visit_target(target)
        self.generic_visit(node)

    def visit_target(self, target: ast.expr) -> None:
        for node in _write_targets(target):
            self.flag_write(node, _dotted(node, self.names))

    def visit_Call(self, node: ast.Call) -> None:
        func = _dotted(node.func, self.names) or ""
        self.flag_write(node, self.call_writes(node, func))
        first = _text(node.args[0]) if node.args else None
        if func in IMPORT_CALLS and first:
            self.flag_import(node, first)
        if func in RUN_STRINGS:
            self.flag(node, f"uses {func} (runs code this scan cannot read)")
        if _matching(func, PATH_CALLS):
            self.flag_paths(node, func)
        delegating = ", ".join(f"{k.arg}=..." for k in node.keywords if k.arg in DELEGATION)
        if delegating:  # one flag per call, however many of its keywords delegate
            self.flag(node, f"delegates decoding: {func or 'a call'}({delegating}) is a library's "
                            "speculative decoding, which the graded methods must do themselves")
        self.generic_visit(node)

    def call_writes(self, node: ast.Call, func: str) -> str | None:
        """The dotted name that `setattr`, `delattr`, `monkeypatch.setattr`, `mock.patch` or
        `mock.patch.object` writes to, or None."""
        if not node.args:
            return None
        setter, path = func.rpartition(".")[2] in ("setattr", "delattr"), _text(node.args[0])
        if func.rpartition(".")[2] == "patch" or (setter and path):
            return path  # a dotted path given as text: mock.patch("time.time"), monkeypatch.setattr("time.time", f)
        if setter or func.endswith("patch.object"):
            obj = _dotted(node.args[0], self.names)
            attr = _text(node.args[1]) if len(node.args) > 1 else None
            return obj and f"{obj}.{attr or '<name>'}"
        return None

    def flag_paths(self, node: ast.Call, func: str) -> None:
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
            path = _text(arg)
            if path is not None and _is_outside(path):
                self.flag(node, f"{func}({path!r}) reaches outside the submission's folder")
