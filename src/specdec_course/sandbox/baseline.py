"""The grader's own decoding on its own copy of a pair, no student code: the speed test's other side.

Run in a grading child (`child.py`) like a probe, and read back the same way: `target_greedy` and
`hf_assisted` (cases `[prompt, max_new_tokens, k]`) and `margin` (cases `[prompt, expected, got]`).
"""

from __future__ import annotations

import torch

from specdec_kit.bench import benchmark as bench
from specdec_kit.bench import runners
from specdec_kit.core.timing import Emit, Observer
from specdec_kit.models.baseline import first_mismatch
from specdec_kit.models.loading import default_dtype, resolve_pair

_setups: dict[tuple, object] = {}


def run_baseline(request: dict, emit: Emit) -> None:
    """The kit's methods on the kit's own copy of a pair, no student code: `target_greedy`, `hf_assisted`
    (cases `[prompt, max_new_tokens, k]`) and `margin` (cases `[prompt, expected, got]`: the target's top-2 logit
    margin where `got` leaves `expected`)."""
    key = (request["pair"], request.get("device", "cpu"))
    if key not in _setups:
        device = torch.device(key[1])
        _setups[key] = bench.make_setup(*resolve_pair(key[0]), {}, device, default_dtype(device), [])
    setup = _setups[key]
    method = request["method"]
    models = type("Models", (), {"target_model": setup.target, "draft_model": setup.draft})
    with Observer(models, emit, request.get("ids", False)):
        for index, case in enumerate(request["cases"]):
            if method == "margin":
                prompt, expected, got = case
                mismatch = first_mismatch(setup.target, runners.encode(setup, prompt), expected, got)
                result = {"position": mismatch.position, "margin": mismatch.margin} if mismatch else {}
            else:
                result = {"token_ids": runners.RUNNERS[method](setup, *case).token_ids}
            emit({"event": "case", "index": index, "result": result})
    emit({"event": "done"})
