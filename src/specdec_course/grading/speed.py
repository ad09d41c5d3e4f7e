"""The speed test, measured by the grading process: the student's cached decoder in a fresh child of its sandbox against
the kit's HF assisted generation and target greedy in a child outside it, while every process of the sandbox is
frozen.

On a CPU both sides' models run here, served as the check pairs' are, and a run is measured by its cost (`Meter.cost`:
the CPU its processes and this process's serving of it used), not by the clock: a loaded machine delays both sides
without changing what each costs, so other jobs' checks and timings run beside it as any other work does, and what ran
is seen, so the decoder timed is the decoder the checks judged (`_own_rounds`). On a GPU each child loads the timing
pair and the clock measures, one timing at a time on the machine with no check of this process beside it
(`sandbox.timing_gate`).

    speed = time_speedup(host, cells, plan, threads=2, before_timing=kernel.join, budget=budget, hidden=inputs)
    checks.judge_speedup(speed, plan.min_ratio)
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time

from specdec_kit import checks
from specdec_kit.bench import benchmark as bench
from specdec_kit.checks.outcomes import assemble
from specdec_kit.checks.speed import SPEED_TEST

from ..core.plan import Plan
from ..sandbox.child import Child, ChildFailed
from ..sandbox.host import KIT, Host
from ..sandbox.models import ModelServer
from ..sandbox.timing_gate import QUIET
from .budget import Budget, out_of_time
from .redact import HiddenInputs


def time_speedup(host: Host, cells: list[tuple[str, str]], plan: Plan, threads: int, before_timing=None,
                 budget: Budget | None = None, hidden: HiddenInputs | None = None) -> dict:
    """Time the student's CachedSpeculativeDecoder against the kit's HF assisted generation and target greedy.

    Each side runs in its own fresh child: the student's forked from `host`, in the notebook's sandbox, the kit's
    from `KIT`, outside it, while every process of the sandbox is frozen; on a CPU each run's cost, else the clock,
    is this process's reading. The
    warm-up runs the student's decoder on the course's timing prompts, untimed; the timed runs, interleaved with
    the order rotated, each decode a prompt nobody has seen (`_unseen`: drawn from the operating system's
    randomness for this run), so no answer kept from an earlier run or computed ahead helps, and each must give the
    tokens of target greedy's run on that prompt (an fp16 near-tie aside). The student's runs are read as hidden
    cases (their prompts kept in `hidden`, for the messages to be scrubbed of). `before_timing` is called after the
    warm-up.
    """
    timing = checks.timing_plan()
    device = str(timing["device"])
    served = device == "cpu"  # each side's models then run here, and each run is measured by its cost
    servers = [ModelServer([timing["pair"]]) if served else None for _ in range(2)]
    student, kit = Child(host, cells, threads, plan.memory_mb, servers[0]), Child(KIT, [], threads, 0, servers[1])
    base = {"pair": timing["pair"], "device": device}
    requests = {"cached": (student, {"kind": "decode", "class": "CachedSpeculativeDecoder", "keep": True}),
                "hf_assisted": (kit, {"kind": "baseline", "method": "hf_assisted"}),
                "target_greedy": (kit, {"kind": "baseline", "method": "target_greedy"})}

    budget, hidden = budget or Budget(float("inf")), hidden or HiddenInputs()

    def timed(method: str, prompt, max_new_tokens: int):
        child, request = requests[method]
        if child is student and budget.left() <= 0:
            raise ChildFailed(SPEED_TEST, kind="Budget", message=out_of_time(plan, SPEED_TEST))
        seconds = plan.check_seconds if child is kit else min(plan.check_seconds, budget.left())
        request = {**base, **request, "cases": [[prompt.text, max_new_tokens, timing["k"]]]}
        delegated = servers[0].delegated if served else 0  # to tell this run's delegations
        with host.box.frozen() if child is kit else contextlib.nullcontext(), \
                budget.pause() if child is kit else contextlib.nullcontext():
            started = time.perf_counter()
            try:
                events = child.request(request, seconds, hidden=child is student)
            finally:
                if child is student:
                    budget.charge(child.used)
                    budget.add_wait(child.held)
            seconds = child.cost if served else time.perf_counter() - started
        [case] = assemble(events, request, redact=child is student)
        return case, seconds, served and servers[0].delegated > delegated

    def own_rounds(run: tuple, prompt) -> None:
        if served:
            _own_rounds(run[0], prompt.text, timing["k"], run[2])

    try:
        for method in ("hf_assisted", "target_greedy"):  # warm-up: loading, allocation, kernel selection
            timed(method, timing["prompts"][0], 8)
        for prompt in timing["prompts"]:
            own_rounds(timed("cached", prompt, timing["max_new_tokens"]), prompt)
        if before_timing:
            with budget.pause():
                before_timing()
        with contextlib.ExitStack() as turn:
            if not served:  # on the clock: nothing else of the grading beside it
                with budget.pause():  # the wait for the machine's one timing at a time
                    turn.enter_context(QUIET.timing())
            speed = {}
            for repeat, prompt, order in bench.interleaved(list(requests), timing["prompts"], timing["repeats"]):
                unseen = _unseen(prompt)
                hidden.add_text(unseen.text)
                runs = {m: timed(m, unseen, timing["max_new_tokens"]) for m in order}
                _same_as_greedy(runs["cached"][0], runs["target_greedy"][0].result["token_ids"], unseen, base, kit,
                                plan)
                own_rounds(runs["cached"], unseen)  # after its tokens: a wrong answer is told as one
                for method, (outcome, seconds, _) in runs.items():
                    speed[(method, prompt.id, repeat)] = len(outcome.result["token_ids"]) / seconds
    finally:
        student.close()
        kit.close()
    return checks.speed_summary(speed, timing, "float16" if device.startswith("cuda") else "float32",
                                "CPU s" if served else "s")


def _unseen(prompt):
    """`prompt` with a number after its text drawn from the operating system's randomness: a prompt nobody has
    decoded before (each timed run draws its own), so that neither the repository, the release, nor a page of an
    earlier grading run tells it."""
    return dataclasses.replace(prompt, text=f"{prompt.text} {secrets.randbelow(10 ** 6):06d}")


def _own_rounds(case, text: str, k: int, delegated: bool) -> None:
    """A run of the student's decoder in the speed test made its own rounds, as the forwards this process served it
    show: no generate with HF's speculative decoding (`delegated`), and the forwards of a decoder that keeps its caches
    at k drafts a round (`checks.judge_cache_use`). Work done elsewhere (a copy of the models of its own) only adds to
    the run's cost."""
    from specdec_kit.models.baseline import zoo_tokenizer

    checks.require(not delegated, "a run of the speed test handed its work to HF's speculative decoding (generate "
                                  "with an assistant model or prompt lookup), not to the decoder's own rounds: the "
                                  "speed test times the decoder the checks judged")
    got = checks.decoded(case, "a run of the speed test").token_ids
    try:
        checks.judge_cache_use(case, zoo_tokenizer()(text).input_ids + list(got), k)
    except checks.CheckFailed as e:
        raise checks.CheckFailed(f"a run of the speed test made forwards unlike the decoder the checks judged: {e}") \
            from None


def _same_as_greedy(case, greedy: list[int], prompt, base: dict, kit: Child, plan: Plan) -> None:
    """A timed run decoded `prompt`: its tokens equal target greedy's up to an fp16 near-tie (margin asked of the
    kit's child)."""
    import torch

    from specdec_kit.models.baseline import Mismatch

    got = checks.decoded(case, f"prompt {prompt.id!r}").token_ids
    if got != greedy:
        request = {**base, "kind": "baseline", "method": "margin", "cases": [[prompt.text, greedy, got]]}
        [where] = assemble(kit.request(request, plan.check_seconds), request)
        dtype = torch.float16 if base["device"].startswith("cuda") else torch.float32
        checks.near_tie_accepted(prompt.id, Mismatch(where.result["position"], where.result["margin"]), dtype)
