"""GPU paths: fp16 by default on CUDA, and exactness up to the first near-tie (margin reported).
Skipped, saying why, where there is no GPU (CI never has one)."""

import dataclasses

import pytest
import torch

from specdec_course.core.plan import load_plan
from specdec_course.grading import verdict
from specdec_kit.checks import NEAR_TIE
from specdec_kit.checks.speed import SPEED_TEST
from specdec_kit.core.prompts import load_prompts
from specdec_kit.models.baseline import first_mismatch

from conftest import REPO, target_greedy
from corpora import solved

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI and this kit's "
                                "CPU machines have none")


@pytest.mark.parametrize("name", ["SpeculativeDecoder", "CachedSpeculativeDecoder"])
def test_fp16_on_cuda_matches_target_up_to_near_ties(solution_classes, tiny_dirs, name):
    decoder = solution_classes[name](*tiny_dirs, device="cuda")
    assert decoder.target_model.dtype == torch.float16 and decoder.draft_model.dtype == torch.float16, \
        f"a GPU pair loads in fp16: target {decoder.target_model.dtype}, draft {decoder.draft_model.dtype}"
    for prompt in load_prompts()[:4]:
        expected = target_greedy(decoder, prompt.text, 40)
        got = decoder.speculative_decode(prompt.text, 40, 4).token_ids
        ids = decoder.target_tokenizer(prompt.text, return_tensors="pt").input_ids.cuda()
        mismatch = first_mismatch(decoder.target_model, ids, expected, got)
        assert mismatch is None or mismatch.margin < NEAR_TIE, (
            f"{name} on {prompt.id}: differs from target greedy at token {mismatch.position} where the target's "
            f"top-1/top-2 margin is {mismatch.margin:.3g}, too large to be fp16 rounding"
        )


def test_grader_times_synthetic_pythia_in_fp16(monkeypatch):
    """As the grader runs it on a GPU (no hub): synthetic-pythia in fp16, the reference clear of the bar."""
    monkeypatch.setenv("SPECDEC_GRADING", "1")
    full = load_plan(REPO / "autograder")
    plan = dataclasses.replace(full, tests={SPEED_TEST: full.tests[SPEED_TEST]}, check_seconds=600)
    result = verdict.judge(solved(), plan)
    assert result.tests[SPEED_TEST].passed, result.tests[SPEED_TEST].message
    assert result.speed["pair"] == "synthetic-pythia" and result.speed["dtype"] == "float16", result.speed
