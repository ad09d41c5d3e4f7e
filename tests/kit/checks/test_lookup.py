"""Prompt lookup's check has teeth: its cases say what they claim, and its round counts leave a decoder that
misses matches no way through.

Example run: python -m pytest tests/kit/checks/test_lookup.py -q
"""

import pytest

from specdec_course.core.oracle import ORACLE, lookup_drafts, lookup_rounds
from specdec_kit import zoo
from specdec_kit.checks import lookup
from specdec_kit.models.baseline import zoo_greedy, zoo_tokenizer

from conftest import REPO

# What each visible draft case's comment promises: (latest, earliest).
PROMISED = [([7, 8], [7, 8]), ([3, 2], [3, 2]), ([2, 7], [1, 7]), ([9, 1, 2, 3], [9, 1, 2, 3]), ([4], [4]), ([], [])]


def test_draft_cases_expect_what_their_comments_say():
    got = [tuple(map(list, ORACLE.lookup(ids, k).drafts)) for ids, k in lookup.DRAFT_CASES]
    assert got == [tuple(p) for p in PROMISED], got


def test_lookup_never_matches_the_last_tokens_themselves():
    assert lookup_drafts([1, 2, 3], 4) == [], "nothing repeats, so nothing is proposed"
    assert lookup_drafts([1, 2, 1], 4) == [2, 1], "the earlier 1 is followed by [2, 1]"


@pytest.mark.parametrize("start,stretch,k,max_tokens", lookup.SCRIPTED_CASES)
def test_scripted_cases_reward_lookup_and_agree_on_both_correct_searches(start, stretch, k, max_tokens):
    ids = lookup.scripted_prompt_ids(start, stretch)
    tokenizer = zoo_tokenizer()
    prompt = tokenizer.decode(ids)
    assert tokenizer(prompt).input_ids == ids, "the prompt encodes back to the ids the rounds are predicted from"
    expected = list(zoo_greedy("scripted", prompt, max_tokens))
    rounds = lookup_rounds(ids, expected, k)
    assert rounds == lookup_rounds(ids, expected, k, latest=False), "the latest and the earliest match agree here"
    assert rounds <= max_tokens - stretch // 2, \
        f"lookup must save rounds ({rounds} for {max_tokens} tokens): a decoder that never drafts is caught"
    assert rounds == lookup_rounds(ids, expected, k) and rounds >= -(-max_tokens // (k + 1)), "no round beats k + 1"


def test_hidden_cases_differ_from_the_visible_ones():
    import sys

    sys.path.insert(0, str(REPO))
    from autograder import hidden

    cases = hidden._lookup_sequences(8, seed=5)
    assert not set(map(str, cases)) & set(map(str, lookup.DRAFT_CASES))
    assert sum(bool(lookup_drafts(ids, k)) for ids, k in cases) >= 6, "most hidden sequences repeat an n-gram"
    assert any(lookup_drafts(ids, k) != lookup_drafts(ids, k, latest=False) for ids, k in cases), \
        "at least one hidden case tells the latest match from the earliest: both must be accepted"
    assert len(zoo.scripted_script().cycle) > max(start + stretch for start, stretch, _, _ in lookup.SCRIPTED_CASES)
