"""The checks of single steps of the decoder, each on its own method: loading, drafting, verification.

    from specdec_kit import checks
    checks.check_draft_tokens(SpeculativeDecoder)      # raises CheckFailed with what to fix

Each builds the student's class on the offline zoo (its own `initialize_*` methods load the models), runs it
on the CPU in fp32 through probes, and judges what it returned and the forward calls seen on its models
against `answers` (correct rounds on the `scripted` pair, read as data in a notebook, computed by the grader's
oracle while grading).
"""

from __future__ import annotations

from .. import zoo
from ..core.timing import ROLES
from ..models.baseline import first_difference, zoo_tokenizer
from ..protocol.probes import LOAD_PADDING, LOAD_TEXT
from .answers import answers_or_recorded
from .core import as_runner, require_seen_forwards
from .failure import CheckFailed, require

K_VALUES = (1, 2, 4, 7)


# ---------------------------------------------------------------------------------------------
# Part 1: loading


def check_loading(decoder, pair: str = "tiny") -> None:
    """Judged from the load probe's forwards (while grading, the grader's own record of the forwards it served):
    each model kept, run on its tokenizer's ids of LOAD_TEXT, in eval mode and fp32, and padded when asked."""
    [case] = as_runner(decoder).run({"kind": "load", "pair": pair})
    text = list(zoo_tokenizer(pair)(LOAD_TEXT).input_ids)
    for role in ROLES:
        calls = case.forwards[role]
        plain = [c for c in calls if c.input_ids is not None and list(c.input_ids) == text and not c.padding]
        require(plain, f"the decoder must keep self.{role}_model and self.{role}_tokenizer from "
                       f"initialize_{role}_model (no forward of self.{role}_model on its tokenizer's ids was seen)")
        require(plain[0].training is False, f"the {role} model is in training mode: call .eval() after loading it")
        require(plain[0].dtype == "float32",
                f"on the CPU the {role} model should be float32 (fp16 is for CUDA), got {plain[0].dtype}")
        require(any(c.padding == LOAD_PADDING and c.input_ids is not None and _holds(c.input_ids, text)
                    for c in calls),
                f"the {role} tokenizer has no pad token (Pythia's has none): set it, e.g. to the EOS token")
    require(case.result["mismatch"] != "accepted",
            "a draft whose tokenizer differs from the target's was accepted: compare the two vocabularies in "
            "__init__ and raise a ValueError that names both models")


def _holds(ids: tuple[int, ...], text: list[int]) -> bool:
    """`ids` is `text` with LOAD_PADDING pad tokens on one side."""
    return len(ids) == len(text) + LOAD_PADDING and text in (list(ids[:len(text)]), list(ids[LOAD_PADDING:]))


# ---------------------------------------------------------------------------------------------
# Part 2: drafting


def check_draft_tokens(decoder, starts: tuple[int, ...] | None = None,
                       k_values: tuple[int, ...] = K_VALUES, answers=None) -> None:
    runner, answers = as_runner(decoder), answers_or_recorded(answers)
    script = zoo.scripted_script()
    cases = [([script.eos_chain[0], start], k)  # two tokens: only new tokens may come back
             for start in starts or tuple(script.cycle[:8]) for k in k_values]
    outcomes = runner.run({"kind": "draft", "pair": "scripted", "cases": cases})
    for (prefix, k), outcome in zip(cases, outcomes):
        got, start = outcome.result["tokens"], prefix[-1]
        require(outcome.result["shape"] == [1, k],
                f"generate_draft_tokens must return the k={k} new tokens as a tensor of shape [1, {k}], got "
                f"{outcome.result['shape'] or outcome.result['type']} (the prompt must not be included)")
        expected = answers.draft_chain(start, k)
        if got != expected:
            where = first_difference(got, expected)
            flat = (start if where == 0 else expected[where - 1]) in script.flat
            # A sampling draft is caught either way: by a near-flat position or by answers that vary.
            [again] = runner.run({"kind": "draft", "pair": "scripted", "cases": [[prefix, k]], "repeat": 3})
            varies = any(answer != got for answer in [again.result["tokens"], *again.result["repeats"]])
            raise CheckFailed(
                f"draft token {where} is {got[where]}, expected the draft model's greedy choice "
                f"{expected[where]} (k={k}). "
                + ("Here the draft's distribution is nearly flat: take the argmax, do not sample."
                   if flat else "The drafts changed between calls on the same input: take the argmax, do "
                                "not sample." if varies else
                   "Feed each new token back in and take the argmax of the last position.")
            )


# ---------------------------------------------------------------------------------------------
# Part 3: verification


def verify_answers(runner, cases: list[tuple[list[int], list[int]]]) -> list[tuple[list, int, list, list | str]]:
    """(accepted tokens, index of the first rejected draft, next token, its shape) per case, from one target forward
    each."""
    answers = []
    for outcome in runner.run({"kind": "verify", "pair": "scripted", "cases": cases}):
        result = outcome.result
        got = (f"a {result['type']} of length {result['length']}" if result.get("length") is not None
               else f"a {result.get('type', 'value of another type')}")
        require(result["triple"],
                f"verify_tokens_vectorized must return (accepted_tokens, n_accepted, next_token), got {got}")
        require_seen_forwards(outcome)
        calls = len(outcome.forwards["target"])
        require(calls == 1, f"verification made {calls} target forward passes: score the prompt and all drafts "
                            "with exactly one, which also gives the correction and bonus tokens")
        answers.append((result["accepted"], result["position"], result["next"], result["next_shape"]))
    return answers


def check_verify_alignment(decoder, starts: tuple[int, ...] | None = None,
                           k_values: tuple[int, ...] = (2, 4, 6), answers=None) -> None:
    script, answers = zoo.scripted_script(), answers_or_recorded(answers)
    plan = [(start, k) for start in starts or tuple(script.cycle[:10]) for k in k_values]
    cases = [([script.eos_chain[0], start], answers.draft_chain(start, k)) for start, k in plan]
    for (start, k), (_, drafts), (_, position, _, _) in zip(plan, cases, verify_answers(as_runner(decoder), cases)):
        expected = answers.rounds(start, k, k + 1).accepted[0]
        require(position == expected,
                f"with drafts {drafts} after token {start}, the first rejected draft is at index {expected}, "
                f"your verifier said {position}. The target's prediction for draft token i is the logit at "
                f"position L-1+i (L = length before the draft); comparing position L+i (one late) or L-2+i (one "
                "early) is the off-by-one.")


def check_correction_and_bonus(decoder, rejected: int = 0, accepted_from: int = 0) -> None:
    """A rejected draft is replaced by the target's token (the correction); a fully accepted draft earns the bonus
    token, both from the verifying forward.

    `rejected` picks which token after which the draft disagrees (in cycle order), `accepted_from`
    the start on the EOS chain whose next two tokens the draft proposes correctly.
    """
    script = zoo.scripted_script()
    x = [t for t in script.cycle if t in script.disagree][rejected]
    start = script.eos_chain[accepted_from]
    chain = [script.target_next[start], script.target_next[script.target_next[start]]]
    (accepted, position, next_token, next_shape), (full, full_position, bonus, bonus_shape) = verify_answers(
        as_runner(decoder), [([x], [script.draft_next[x]]), ([start], chain)])
    require(position == 0 and accepted == [],
            f"with the draft [{script.draft_next[x]}] after token {x}, which the target would not produce, the draft "
            f"must be rejected (n_accepted 0, accepted_tokens []); got n_accepted {position}, accepted_tokens "
            f"{accepted}")
    require(next_token == [script.target_next[x]],
            f"after a rejection next_token must be the target's own token {script.target_next[x]} (the "
            f"correction), read from the same forward pass; got {next_token} (shape {next_shape})")
    require(full_position == 2 and full == chain,
            f"with the drafts {chain} after token {start}, which the target agrees with, both must be accepted "
            f"(n_accepted 2, accepted_tokens {chain}); got n_accepted {full_position}, accepted_tokens {full}")
    require(bonus == [script.target_next[chain[-1]]],
            f"when every draft is accepted, next_token is the bonus token: the target's argmax after the last "
            f"draft, from the same forward pass. After the drafts {chain} (all accepted) next_token should be "
            f"[{script.target_next[chain[-1]]}] (shape [1, 1]); got {bonus} (shape {bonus_shape})")
