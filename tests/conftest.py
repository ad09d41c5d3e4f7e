"""Shared fixtures: the solution's decoder classes (through the seam) and the zoo pairs they run on.

Example run: python -m pytest tests/ -q
"""

import contextlib
import csv
import html
import json
import logging
import os
import re
import shutil
import string
import subprocess
import warnings
from pathlib import Path

import pytest

from specdec_kit.core import settings

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "solutions" / "speculative_decoding.ipynb"
DECODER_NAMES = ["SpeculativeDecoder", "CachedSpeculativeDecoder"]

# torch reads these when a test first imports it: the tests that need torch import it themselves.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, str(settings.test_threads()))

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (CI installs it with "
                                                              "apt-get)")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000")


def chromium(*arguments: str) -> subprocess.CompletedProcess:
    """Headless Chromium with `arguments` (its stdout as text)."""
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, *arguments], capture_output=True, text=True, timeout=120,
                          check=True)


def probe(page: Path, script: str, *arguments: str) -> str:
    """The DOM headless Chromium makes of `page` with `script` run after it: a page with the kit's
    Content-Security-Policy lets that one script (and no other) run, by a nonce."""
    copy = page.with_name(f"probe-{page.name}")
    text = re.sub(r'(http-equiv="Content-Security-Policy" content=")', r"\1script-src 'nonce-probe'; ",
                  page.read_text(), count=1)
    head, _, tail = text.rpartition("</body>")
    copy.write_text(f"{head}<script nonce='probe'>{script}</script></body>{tail}")
    return chromium(*arguments, "--dump-dom", copy.as_uri()).stdout


def title_after_scripts(page: Path) -> str:
    """The page's title once headless Chromium has loaded it and run whatever it lets run (a hostile script in the
    tests sets the title)."""
    dom = chromium("--dump-dom", page.as_uri()).stdout
    found = re.search(r"<title>(.*?)</title>", dom, re.S)
    return html.unescape(found.group(1)) if found else ""


def image_widths(page: Path) -> list[int]:
    """The width of each image of `page` as headless Chromium decoded it, in page order: 0 for one not shown."""
    dom = probe(page, "document.title = JSON.stringify([...document.images].map(i => i.naturalWidth))")
    return json.loads(html.unescape(re.search(r"<title>(\[[\d,]*\])</title>", dom).group(1)))


def pixels_of_colour(pixels, colour: str) -> int:
    """How many pixels of a screenshot have the colour `colour` ("#c8f0c8"), to within 2%."""
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return int((abs(pixels[..., :3] - rgb).max(axis=-1) < 0.02).sum())


def runs_as_formula(cell: str) -> bool:
    """Whether a spreadsheet opening a CSV would run `cell`: it starts, after leading spaces, with = + - @, or with a
    tab or a carriage return (OWASP's list), and is not a number (float() reads it, and it holds only digits, signs,
    a point and an exponent's e: float() also takes spaces, "inf", "1_000" and other scripts' digits)."""
    try:
        float(cell)
        number = not set(cell.lower()) - set(string.digits + "+-.e")
    except ValueError:
        number = False
    return (cell[:1] in ("\t", "\r") or cell.lstrip()[:1] in ("=", "+", "-", "@")) and not number


def spreadsheet_formulas(path: Path) -> list[str]:
    """The cells of the CSV at `path` that a spreadsheet opening it would run."""
    with path.open(newline="", encoding="utf-8") as f:
        return [cell for row in csv.reader(f) for cell in row if runs_as_formula(cell)]


def screenshot(page: Path, width: int = 1200, height: int = 3000):
    """The page as headless Chromium draws it: an array of RGB(A) floats in [0, 1], `height` x `width`."""
    import matplotlib.image

    shot = page.with_suffix(".png")
    chromium(f"--screenshot={shot}", f"--window-size={width},{height}", page.as_uri())
    return matplotlib.image.imread(shot)


@pytest.fixture(scope="session")
def solution_classes():
    from specdec_kit.protocol.adapters import load_decoder_classes

    return load_decoder_classes(SOLUTION)


@pytest.fixture(scope="session")
def tiny_dirs():
    from specdec_kit import zoo

    return tuple(str(p) for p in zoo.materialize("tiny"))


@pytest.fixture(scope="session")
def scripted_dirs():
    from specdec_kit import zoo

    return tuple(str(p) for p in zoo.materialize("scripted"))


@pytest.fixture(scope="session", params=DECODER_NAMES)
def tiny_decoder(request, solution_classes, tiny_dirs):
    """Each solution class on the tiny pair, fp32 on the CPU."""
    return solution_classes[request.param](*tiny_dirs, device="cpu")


@pytest.fixture(scope="session", params=DECODER_NAMES)
def scripted_decoder(request, solution_classes, scripted_dirs):
    return solution_classes[request.param](*scripted_dirs, device="cpu")


def target_greedy(decoder, prompt: str, max_new_tokens: int) -> list[int]:
    """The target's own `generate(do_sample=False)`: the reference every decoder must equal."""
    from specdec_kit.models import baseline

    ids = decoder.target_tokenizer(prompt, return_tensors="pt").input_ids.to(decoder.target_model.device)
    return baseline.target_greedy(decoder.target_model, ids, max_new_tokens)


@contextlib.contextmanager
def nothing_warned():
    """Fail on any Python warning inside the block (raised where it is given) and on any transformers log record at
    WARNING or above (checked at the end). transformers logs some warnings once per process: that memory is cleared
    first, so a warning given before the block still counts inside it."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    library = logging.getLogger("transformers")
    level = library.level
    logging.Logger.warning_once.cache_clear()
    library.setLevel(logging.WARNING)
    library.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        library.removeHandler(handler)
        library.setLevel(level)
    assert not records, f"transformers logged {[record.getMessage() for record in records]}"
