"""Shared fixtures: the solution's decoder classes (through the seam) and the zoo pairs they run on.

Example run: python -m pytest tests/ -q
"""

import contextlib
import logging
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from specdec_kit import baseline, settings, zoo
from specdec_kit.adapters import load_decoder_classes

REPO = Path(__file__).resolve().parents[1]
SOLUTION = REPO / "solutions" / "speculative_decoding.ipynb"
DECODER_NAMES = ["SpeculativeDecoder", "CachedSpeculativeDecoder"]

torch.set_num_threads(settings.test_threads())

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (CI installs it with "
                                                              "apt-get)")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000")


def chromium(*arguments: str) -> subprocess.CompletedProcess:
    """Headless Chromium with `arguments` (its stdout as text)."""
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, *arguments], capture_output=True, text=True, timeout=120,
                          check=True)


def screenshot(page: Path, width: int = 1200, height: int = 3000):
    """The page as headless Chromium draws it: an array of RGB(A) floats in [0, 1], `height` x `width`."""
    import matplotlib.image

    shot = page.with_suffix(".png")
    chromium(f"--screenshot={shot}", f"--window-size={width},{height}", page.as_uri())
    return matplotlib.image.imread(shot)


@pytest.fixture(scope="session")
def solution_classes():
    return load_decoder_classes(SOLUTION)


@pytest.fixture(scope="session")
def tiny_dirs():
    return tuple(str(p) for p in zoo.materialize("tiny"))


@pytest.fixture(scope="session")
def scripted_dirs():
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
