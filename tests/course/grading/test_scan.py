"""The static scan flags code that reaches into the kit or the grader, and leaves ordinary solutions alone.

Example run: python -m pytest tests/course/grading/test_scan.py -q
"""

import nbformat
import pytest

from specdec_course.core.nbgrader_course import BEGIN_HIDDEN, END_HIDDEN
from specdec_course.grading.scan import scan_notebook, scan_source

from conftest import REPO, SOLUTION

SOLUTION_CELL = {"grade": False, "grade_id": "speculative_decoder", "locked": False, "solution": True,
                 "schema_version": 3}
GRADED_TEST = {"grade": True, "grade_id": "test_exact", "points": 1, "locked": True, "solution": False,
               "schema_version": 3}

# (snippet, text its flags must contain): at least one per kind of flag the scan raises.
TAMPERING = [
    # 1. Writing to the kit, reaching for the grader.
    ("from specdec_kit import checks\nchecks.check_exact = lambda *a: None", "specdec_kit.checks.check_exact"),
    ("import specdec_kit.checks\nspecdec_kit.checks.require = print", "specdec_kit.checks.require"),
    ("from specdec_kit.core.timing import ForwardRecorder\nForwardRecorder._after = None",
     "changes specdec_kit.core.timing.ForwardRecorder._after"),
    ("import specdec_kit.checks as c\nc.PROMPTS += ('x',)", "changes specdec_kit.checks.PROMPTS"),
    ("from specdec_kit import checks\ndel checks.check_exact", "changes specdec_kit.checks.check_exact"),
    ("from specdec_kit import checks\nsetattr(checks, 'check_exact', print)", "changes specdec_kit.checks.check_exact"),
    ("from specdec_kit import checks\ndelattr(checks, 'check_cache_use')", "specdec_kit.checks.check_cache_use"),
    ("from specdec_kit import checks\nc = checks\nc.check_exact = print", "changes specdec_kit.checks.check_exact"),
    ("from specdec_kit import checks\nchecks.__dict__['check_exact'] = print", "changes specdec_kit.checks.__dict__"),
    ("from specdec_kit import DecodeResult\nDecodeResult.acceptance_rate = 1.0",
     "changes specdec_kit.DecodeResult.acceptance_rate"),
    ("from unittest import mock\nmock.patch('specdec_kit.checks.check_exact').start()",
     "changes specdec_kit.checks.check_exact"),
    ("from autograder import hidden", "imports autograder"),
    ("from specdec_course.core.oracle import predict_rounds", "imports specdec_course"),
    ("import autograder.hidden as h\nh.check_exact = print", "imports autograder"),
    ("import solutions", "imports solutions"),
    ("import importlib\nimportlib.import_module('autograder.hidden')", "imports autograder"),
    ("source = open('autograder/hidden.py').read()", "mentions 'autograder/'"),
    ("name = 'solutions/speculative_decoding.ipynb'", "mentions 'solutions/'"),
    ("name = 'hidden.py'", "mentions 'hidden.py'"),
    ("db = 'sqlite:///gradebook.db'", "mentions 'gradebook'"),
    ("rows = list(csv.reader(open('grades.csv')))", "mentions 'grades.csv'"),
    # 2. The interpreter's own machinery.
    ("import sys\nsys.modules['specdec_kit.checks'].check_exact = print", "uses sys.modules"),
    ("from sys import modules", "imports sys.modules"),
    ("import builtins\nbuiltins.print = None", "builtins"),
    ("__builtins__['open'] = None", "uses __builtins__"),
    ("import gc", "imports gc"),
    ("import gc\nobjects = gc.get_objects()", "uses gc"),
    ("import ctypes", "imports ctypes"),
    ("import os\nos._exit(0)", "uses os._exit"),
    ("import importlib\nimportlib.reload(checks)", "uses importlib.reload"),
    ("from importlib import reload", "imports importlib.reload"),
    ("exec(code)", "uses exec"),
    # 3. Frames and code objects.
    ("import inspect\nframes = inspect.stack()", "inspect"),
    ("import sys\ncaller = sys._getframe(1)", "uses sys._getframe"),
    ("import sys\nsys.settrace(tracer)", "uses sys.settrace"),
    ("import sys\nsys.setprofile(profiler)", "uses sys.setprofile"),
    ("values = frame.f_back.f_locals", "uses f_back"),
    ("values = frame.f_locals", "uses f_locals"),
    ("values = frame.f_globals", "uses f_globals"),
    ("frame = error.__traceback__.tb_frame", "uses tb_frame"),
    ("frame = generator.gi_frame", "uses gi_frame"),
    ("code = check.__code__", "uses __code__"),
    ("namespace = check.__globals__", "uses __globals__"),
    ("cells = check.__closure__", "uses __closure__"),
    # 4. The clocks and calls the kit measures with.
    ("import time\ntime.perf_counter = lambda: 0.0", "changes time.perf_counter"),
    ("import time\ntime.time = lambda: 0.0", "changes time.time"),
    ("import time\ntime.monotonic = lambda: 0.0", "changes time.monotonic"),
    ("import time\nsetattr(time, 'perf_counter', fake)", "changes time.perf_counter"),
    ("import torch\ntorch.cuda.synchronize = lambda: None", "changes torch.cuda.synchronize"),
    ("from torch import cuda\ncuda.synchronize = lambda: None", "changes torch.cuda.synchronize"),
    ("import torch\ntorch.cat = fast_cat", "changes torch.cat"),
    ("import torch\ntorch.nn.Module.__call__ = uncounted_call", "changes torch.nn.Module.__call__"),
    ("monkeypatch.setattr('time.perf_counter', fake)", "changes time.perf_counter"),
    # 5. Delegation: a library's speculative decoding in place of the student's.
    ("out = self.target_model.generate(ids, assistant_model=self.draft_model)", "delegates decoding"),
    ("out = model.generate(ids, prompt_lookup_num_tokens=k, max_new_tokens=n)", "delegates decoding"),
    # 6. Forward hooks and the kit's counter.
    ("self.target_model._forward_hooks.clear()", "uses _forward_hooks"),
    ("self.target_model._forward_pre_hooks.clear()", "uses _forward_pre_hooks"),
    ("import torch\ntorch.nn.modules.module._global_forward_hooks.clear()", "uses torch.nn.modules.module"),
    ("import torch\ntorch.nn.modules.module._global_forward_hooks.clear()", "uses _global_forward_hooks"),
    ("self.target_model.register_forward_hook(hook)", "uses register_forward_hook"),
    ("self.draft_model.register_forward_pre_hook(hook)", "uses register_forward_pre_hook"),
    ("from specdec_kit.core.timing import ForwardRecorder", "imports ForwardRecorder"),
    ("from specdec_kit import counting\nrecorder = counting.ForwardRecorder(model)", "uses ForwardRecorder"),
    # 6. Files outside the submission's folder.
    ("text = open('/etc/passwd').read()", "open('/etc/passwd') reaches outside"),
    ("text = open(f'../{name}.ipynb').read()", "open('../{}.ipynb') reaches outside"),
    ("from pathlib import Path\nnotes = Path('~/notes.txt')", "Path('~/notes.txt') reaches outside"),
    ("import os\nnames = os.listdir('..')", "os.listdir('..') reaches outside"),
    ("import os\nfor step in os.walk('/'):\n    pass", "os.walk('/') reaches outside"),
    ("import glob\nfound = glob.glob('/home/*/*.ipynb')", "glob.glob('/home/*/*.ipynb') reaches outside"),
    ("import shutil\nshutil.copy('../x.py', 'x.py')", "shutil.copy('../x.py') reaches outside"),
    ("import os\nos.remove('/tmp/grades')", "os.remove('/tmp/grades') reaches outside"),
    ("import os\nos.chdir('runs')", "uses os.chdir"),
    ("from pathlib import Path\nhome = Path.home()", "uses Path.home"),
    ("import os\nhome = os.path.expanduser('~')", "uses os.path.expanduser"),
    ("from pathlib import Path\nabove = Path.cwd().parent", "uses Path.cwd().parent"),
    ("from pathlib import Path\ncourse = Path.cwd().parents[1]", "uses Path.cwd().parents"),
]

INNOCENT = [
    "import torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer",
    "from specdec_kit import DecodeResult, crop_to\nfrom specdec_kit.models.loading import model_source",
    "from specdec_kit.models.loading import model_source\nsource, kwargs = model_source('zoo:tiny/target')",
    "import time\nstart = time.perf_counter()\nrun()\nelapsed = time.perf_counter() - start",
    "out = self.target_model(input_ids=ids, past_key_values=cache, use_cache=True)",
    "out = self.target_model(input_ids=ids, cache=cache, use_cache=True)\ncache = out.cache",
    "from specdec_kit import cache_kwargs, cache_of\nout = self.draft_model(input_ids=ids, **cache_kwargs(cache))\n"
    "cache = cache_of(out)",
    "import torch\nwith torch.inference_mode():\n    logits = model(ids).logits",
    "from specdec_kit import crop_to\ncrop_to(cache, keep)",
    "from specdec_kit import checks\nchecks.check_exact(SpeculativeDecoder)",
    "from specdec_kit import checks\nmin_ratio = checks.SPEEDUP_MIN_RATIO\nmin_ratio += 0.5",
    "self._caches = {'target': (None, None)}\nself._caches['draft'] = (cache, ids)",
    "setattr(self, 'draft_model', model)",
    "import torch\ntorch.manual_seed(0)\ntorch.backends.cuda.matmul.allow_tf32 = True",
    "import json\nwith open('results.json', 'w') as f:\n    json.dump(rows, f)",
    "from pathlib import Path\nfigure_path = Path('plots') / 'bench.png'\nfolder = figure_path.parent",
    "solutions = [1, 2, 3]\nprint('the solutions to exercise 2', solutions)",
    "import os\ndevice = os.environ.get('DEVICE', 'cpu')\npath = os.path.join('runs', 'a.json')",
    "import importlib.util\nfound = importlib.util.find_spec('specdec_kit') is not None",
    "import sys\nprint(sys.executable, sys.version)",
    "next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)",
]


def code(source, nbgrader=None):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


@pytest.mark.parametrize("path", [SOLUTION, REPO / "assignment" / "speculative_decoding.ipynb"],
                         ids=["solution", "assignment"])
def test_reference_notebooks_scan_clean(path):
    flags = scan_notebook(nbformat.read(path, as_version=4))
    assert flags == [], f"{path.relative_to(REPO)} must raise no flag; got {flags}"


@pytest.mark.parametrize("snippet, expected", TAMPERING)
def test_tampering_is_flagged(snippet, expected):
    flags = scan_source(snippet, "cell 3")
    assert any(expected in flag for flag in flags), f"scanning {snippet!r} must flag {expected!r}; got {flags}"


@pytest.mark.parametrize("snippet", INNOCENT)
def test_innocent_code_is_not_flagged(snippet):
    flags = scan_source(snippet, "cell 3")
    assert flags == [], f"scanning {snippet!r} must raise no flag; got {flags}"


def test_labels_lines_and_order():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("open('/etc/passwd') in prose is not code"),
        code("import time\n\nx = 1\ntime.perf_counter = lambda: 0.0", SOLUTION_CELL),
        code("import gc\ny = 2\nimport sys; sys.modules.clear(); sys.modules.clear()"),
    ])
    flags = scan_notebook(notebook)
    expected = [
        "speculative_decoder, line 4: changes time.perf_counter (the clock the kit times with)",
        "cell 2, line 1: imports gc (finds any live object, the grader's included)",
        "cell 2, line 3: uses sys.modules (every loaded module, the kit's included)",
    ]
    assert flags == expected, f"flags must be labelled by grade_id or 'cell <index>', in cell then line order, " \
                              f"without repeats; expected {expected}, got {flags}"


def test_kit_import_in_one_cell_counts_in_another():
    notebook = nbformat.v4.new_notebook(cells=[
        code("from specdec_kit import checks", GRADED_TEST),
        code("checks.check_exact = print"),
    ])
    flags = scan_notebook(notebook)
    expected = ["cell 1, line 1: changes specdec_kit.checks.check_exact (the grading kit's code)"]
    assert flags == expected, f"a write to a kit name imported in another cell must be flagged; expected " \
                              f"{expected}, got {flags}"


def test_shell_lines_are_flagged_not_parsed():
    source = "%pip install -q x\n  !cat /etc/passwd\n%time import gc\nimport time\ntime.time = lambda: 0.0"
    flags = scan_notebook(nbformat.v4.new_notebook(cells=[code(source)]))
    expected = ["cell 0, line 5: changes time.time (the clock the kit times with)",
                "cell 0, line 1: runs '%pip install -q x' (a shell line or magic: not scanned)",
                "cell 0, line 2: runs '!cat /etc/passwd' (a shell line or magic: not scanned)",
                "cell 0, line 3: runs '%time import gc' (a shell line or magic: not scanned)"]
    assert flags == expected, f"shell lines and magics are flagged (never parsed), line numbers kept; expected " \
                              f"{expected}, got {flags}"


def test_hidden_tests_of_test_cells_are_not_scanned():
    hidden = f"{BEGIN_HIDDEN}\nimport gc\n{END_HIDDEN}\nimport ctypes"
    notebook = nbformat.v4.new_notebook(cells=[code(hidden, GRADED_TEST), code(hidden, SOLUTION_CELL)])
    flags = scan_notebook(notebook)
    expected = ["test_exact, line 4: imports ctypes (raw memory access)",
                "speculative_decoder, line 2: imports gc (finds any live object, the grader's included)",
                "speculative_decoder, line 4: imports ctypes (raw memory access)"]
    assert flags == expected, f"only a graded test cell's hidden region is skipped; expected {expected}, got {flags}"


def test_syntax_error_gives_one_flag():
    flags = scan_source("def broken(:\n    checks.check_exact = print", "speculative_decoder")
    expected = ["speculative_decoder: syntax error, not scanned"]
    assert flags == expected, f"a cell that does not parse must give {expected}, got {flags}"


def test_syntax_error_leaves_other_cells_scanned():
    notebook = nbformat.v4.new_notebook(cells=[code("import gc"), code("def broken(:", SOLUTION_CELL)])
    flags = scan_notebook(notebook)
    expected = ["cell 0, line 1: imports gc (finds any live object, the grader's included)",
                "speculative_decoder: syntax error, not scanned"]
    assert flags == expected, f"expected {expected}, got {flags}"
