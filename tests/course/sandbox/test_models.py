"""The check pairs' models run in the grading process (`specdec_course.sandbox.models`), the grading child's decoders
hold stand-ins (`specdec_kit.protocol.remote`): the forwards the checks judge are what the grader ran, whatever the
child says.

Example run: python -m pytest tests/course/sandbox/test_models.py -q
"""

import collections
import concurrent.futures
import json
import time

import pytest
import torch

from specdec_course.sandbox import models
from specdec_course.sandbox.child import Child, ChildFailed, ChildRunner
from specdec_course.sandbox.host import KIT, Host
from specdec_course.sandbox.models import MAX_CACHES, MAX_HELD, MAX_NEW, MAX_TOKENS, ModelServer, NoProgress, OutOfTime
from specdec_kit import cache_kwargs, cache_of, crop_to, zoo
from specdec_kit.checks import LocalRunner
from specdec_kit.core import settings
from specdec_kit.protocol import remote
from specdec_kit.protocol.adapters import cells_to_consider

from conftest import nothing_warned
from corpora import FORGE_FORWARDS, catalogue_entry, compiled_models, solved, with_cell

SCRIPTED = {"kind": "decode", "pair": "scripted", "ids": True,
            "cases": [("a b c", 20, 3), ("x y", 16, 5)]}


def child_of(notebook, models: ModelServer | None) -> Child:
    cells = [(label, source) for _, label, source, _ in cells_to_consider(notebook)]
    return Child(Host(None), cells, threads=settings.test_threads(), models=models)


def forwards(outcomes) -> list[dict]:
    return [{role: [(c.new_tokens, c.cached_tokens, c.input_ids) for c in case.forwards[role]]
             for role in case.forwards} for case in outcomes]


@pytest.fixture(scope="module")
def local(solution_classes):
    """The cached decoder's forwards as the kit's hooks see them in this process."""
    return LocalRunner(solution_classes["CachedSpeculativeDecoder"]).run(SCRIPTED)


NOTEBOOKS = {"honest": solved, "forged": lambda: with_cell(solved(), FORGE_FORWARDS, after="imports"),
             "compiled": compiled_models}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(NOTEBOOKS))
def test_the_grader_runs_and_records_every_forward(local, kind):
    """In a child with served models, the solution decodes as in this process, and the forwards recorded are the
    grader's: the same as the hooks saw locally, also when the child's class bodies forge its forward events, and
    when the notebook compiles its models (as the course's own student did)."""
    notebook = NOTEBOOKS[kind]()
    child = child_of(notebook, ModelServer(["scripted"]))
    try:
        served = ChildRunner(child, "CachedSpeculativeDecoder", seconds=120).run(SCRIPTED)
    finally:
        child.close()
        child.host.close()
    assert [o.result["token_ids"] for o in served] == [o.result["token_ids"] for o in local], \
        "the decoder gives the same tokens on served models"
    assert forwards(served) == forwards(local), "the grader's record equals what the hooks saw in this process"


@pytest.mark.slow
def test_a_child_without_served_models_has_no_forward_events(local):
    """The child's own forward events are never read: a child that is not served reports none (the timed child on a
    GPU)."""
    child = child_of(solved(), None)
    try:
        [outcome, _] = ChildRunner(child, "CachedSpeculativeDecoder", seconds=120).run(SCRIPTED)
    finally:
        child.close()
        child.host.close()
    assert outcome.result["token_ids"] == local[0].result["token_ids"]
    assert outcome.forwards == {"target": [], "draft": []}, outcome.forwards


def refusal(server: ModelServer, request: dict) -> str:
    sent = []
    assert server.serve(request, sent.append) == [], "a refused request runs nothing"
    [header] = [json.loads(message) for message in sent]
    assert header["ok"] is False, header
    return header["message"]


def test_requests_are_checked_before_anything_runs():
    server = ModelServer(["scripted"])
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(zoo.materialize("scripted")[0]).vocab_size
    base = {"op": "forward", "pair": "scripted", "role": "target", "ids": [[1, 2, 3]], "cache": None}
    assert "no model" in refusal(server, {**base, "pair": "synthetic-small"})
    assert "no model" in refusal(server, {**base, "role": "assistant"})
    assert "0.." in refusal(server, {**base, "ids": [[1, vocab + 5]]})
    assert "whole numbers" in refusal(server, {**base, "ids": [[1, 2.5]]})
    assert "batch size 1" in refusal(server, {**base, "ids": "1 2 3"})
    assert "batch size 1" in refusal(server, {**base, "ids": [[1, 2], [3, 4]]})
    assert "no cache" in refusal(server, {**base, "cache": 7})
    assert "unknown request" in refusal(server, {"op": "load", "path": "/etc/passwd"})
    assert "only" in refusal(server, {"op": "generate", "pair": "scripted", "role": "target", "ids": [[1, 2]],
                                      "settings": {"streamer": "x"}})


def test_the_record_holds_how_the_child_asked_for_each_forward():
    """The mode and dtype of the stand-in that asked, and the positions its attention mask left out, are in the
    grader's record of a forward (test_loading judges them there); a refused dtype name runs nothing."""
    server = ModelServer(["scripted"])
    base = {"op": "forward", "pair": "scripted", "role": "draft", "ids": [[1, 2, 3, 4]], "cache": None}
    [event] = server.serve({**base, "mask": [[1, 1, 0, 0]], "training": True, "dtype": "float16"}, lambda m: None)
    assert (event["padding"], event["training"], event["dtype"]) == (2, True, "float16"), event
    [event] = server.serve(base, lambda m: None)
    assert (event["padding"], event["training"], event["dtype"]) == (0, None, None), event
    assert "float32" in refusal(server, {**base, "dtype": "my own dtype"})


def test_a_generate_with_hfs_speculative_decoding_is_counted():
    """A generate with an assistant model or prompt lookup is counted by the server (the speed test's timed runs must
    have none, `grading/speed.py`), however the child's code spelled the call; a plain generate is not."""
    server = ModelServer(["scripted"])
    base = {"op": "generate", "pair": "scripted", "role": "target", "ids": [[1, 2]]}
    server.serve({**base, "settings": {"max_new_tokens": 2, "do_sample": False}}, lambda m: None)
    assert server.delegated == 0
    server.serve({**base, "settings": {"max_new_tokens": 2, "do_sample": False,
                                       "assistant_model": ["scripted", "draft"]}}, lambda m: None)
    server.serve({**base, "settings": {"max_new_tokens": 2, "prompt_lookup_num_tokens": 2}}, lambda m: None)
    assert server.delegated == 2


@pytest.mark.parametrize("k", [2, 6])
def test_a_served_assisted_generate_drafts_as_the_childs_assistant_says_then_forgets_it(k):
    """transformers reads k from the assistant's generation config: the server sets what the child's assistant holds
    (a stand-in sends it, `remote.ASSISTANT_SETTINGS`) for that generate alone, so the speed test's baseline drafts k
    a round and no child's setting reaches the next."""
    server = ModelServer(["scripted"])
    draft = server._model({"pair": "scripted", "role": "draft"})
    before = {name: getattr(draft.generation_config, name) for name in remote.ASSISTANT_SETTINGS}
    events = server.serve({"op": "generate", "pair": "scripted", "role": "target", "ids": [[1, 2]],
                           "settings": {"max_new_tokens": 16, "do_sample": False,
                                        "assistant_model": ["scripted", "draft"], "num_assistant_tokens": k,
                                        "num_assistant_tokens_schedule": "constant",
                                        "assistant_confidence_threshold": 0.0}}, lambda m: None)
    fed = [e["new_tokens"] for e in events if e.get("event") == "forward" and e["role"] == "target"]
    assert max(fed[1:]) == k + 1  # the scripted draft agrees with its target: every round drafts all k
    assert {name: getattr(draft.generation_config, name) for name in remote.ASSISTANT_SETTINGS} == before


def test_the_speed_tests_baseline_drafts_k_a_round_on_served_models():
    """The kit's HF assisted generation, run in a child on served models as the speed test runs it on a CPU, drafts
    the k it was asked for: the stand-in sends what `runners.pin_assistant_k` set on its assistant."""
    child = Child(KIT, [], threads=settings.test_threads(), models=ModelServer(["scripted"]))
    try:
        events = child.request({"kind": "baseline", "method": "hf_assisted", "pair": "scripted", "device": "cpu",
                                "cases": [["a b c", 16, 3]]}, 120)
    finally:
        child.close()
    fed = [e["new_tokens"] for e in events if e["event"] == "forward" and e["role"] == "target"]
    assert max(fed[1:]) == 3 + 1


LARGEST = {"op": "generate", "pair": "tiny", "role": "target", "ids": [[5] * MAX_TOKENS],
           "settings": {"max_new_tokens": MAX_NEW, "min_new_tokens": MAX_NEW, "use_cache": False, "do_sample": False}}


def test_a_request_stops_at_the_deadline_of_the_check_that_asked():
    """The largest generate the caps allow (2,048 positions, 1,024 new tokens, no cache: most of an hour on a CPU)
    stops at the step that finds its check's limit passed; a forward asked for past it does not run."""
    server = ModelServer(["tiny"])
    started = time.monotonic()
    with pytest.raises(OutOfTime):
        server.serve(LARGEST, lambda message: None, over=lambda: time.monotonic() > started + 2)
    assert time.monotonic() - started < 15, f"stopped after {time.monotonic() - started:.0f} s"
    forward = {"op": "forward", "pair": "tiny", "role": "target", "ids": [[1, 2, 3]], "cache": None}
    with pytest.raises(OutOfTime):
        server.serve(forward, lambda message: None, over=lambda: True)


def test_one_call_sending_the_target_one_input_more_than_repeats_times_in_a_row_is_no_progress():
    """A decode emits a token each round, so its target's input changes every round: one call of the student's code
    may send one input REPEATS times in a row (a warm-up), not more; a draft's input between does not break the row,
    a new call (each sample of a prompt is one) or a new request starts it afresh."""
    forward = {"op": "forward", "pair": "tiny", "role": "target", "ids": [[1, 2, 3]], "cache": None}
    server = ModelServer(["tiny"])
    for begin in (server.reset, server.called):
        begin()
        for _ in range(models.REPEATS):
            server.serve(forward, lambda message: None)
            server.serve({**forward, "role": "draft"}, lambda message: None)
        with pytest.raises(NoProgress, match=f"{models.REPEATS + 1} times in a row: a round that emits no token") \
                as stopped:
            server.serve(forward, lambda message: None)
        assert "at L instead of L-1" in str(stopped.value), f"it names the verifier's likely slice: {stopped.value}"
    server.called()
    for ids in [[[1, 2, 3]], [[1, 2, 4]]] * models.REPEATS:  # alternating inputs are progress
        server.serve({**forward, "ids": ids}, lambda message: None)


@pytest.mark.slow
def test_a_loop_that_emits_no_token_fails_its_check_at_once():
    """The catalogued loop that adds nothing in a round with no room for drafts is stopped by the server at its
    first input sent more than REPEATS times in a row, long before the check's time limit, and the message says why."""
    child = child_of(catalogue_entry("no_bonus_token_in_loop"), ModelServer(["scripted"]))
    try:
        with pytest.raises(ChildFailed) as failed:
            ChildRunner(child, "SpeculativeDecoder", 60).run(SCRIPTED)
    finally:
        child.close()
    assert failed.value.kind == "NoProgress" and "a round that emits no token" in failed.value.message, failed.value
    # In the submission's own time, as the limit counts it: a loaded machine stretches the clock, not this.
    assert child.used < 30, f"stopped after {child.used:.0f} s of its own time, not at once"


@pytest.mark.slow
def test_no_job_waits_on_another_jobs_request():
    """Each grading job (thread) runs its own copy of the models: a forward of one job runs while another job's
    largest generate is in flight, instead of waiting for it."""
    busy, forward = ModelServer(["tiny"]), {"op": "forward", "pair": "tiny", "role": "target", "ids": [[1, 2, 3]],
                                            "cache": None}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        until = time.monotonic() + 20
        hog = pool.submit(busy.serve, LARGEST, lambda message: None, lambda: time.monotonic() > until)
        time.sleep(2)  # the generate is running
        started = time.monotonic()
        pool.submit(ModelServer(["tiny"]).serve, forward, lambda message: None).result()
        waited = time.monotonic() - started
        assert not hog.done(), "the generate was still running while the other job's forward ran"
        with pytest.raises(OutOfTime):
            hog.result()
    assert waited < 10, f"a 3-token forward beside another job's generate took {waited:.1f} s"
    assert models.model("tiny", "target") is models.model("tiny", "target"), "a job loads each model once"


def test_the_caches_kept_for_a_child_are_bounded():
    """A child that makes cache after cache (200 samples do) costs the grader at most MAX_CACHES of them: the least
    recently used are let go, and a handle let go is refused."""
    server = ModelServer(["scripted"])
    request = {"op": "forward", "pair": "scripted", "role": "draft", "ids": [[1, 2, 3]], "cache": None,
               "use_cache": True}
    for _ in range(MAX_CACHES + 5):
        assert len(server.serve(request, lambda message: None)) == 1, "each forward runs and is recorded"
    assert len(server._caches) == MAX_CACHES, len(server._caches)
    assert "no cache 1 is held" in refusal(server, {**request, "cache": 1})


def test_the_positions_held_for_a_child_are_bounded_as_caches_grow_and_shrink():
    """The server's running count of held positions is what its caches hold, after new caches, forwards that grow a
    held one, clones and crops; past MAX_HELD the least recently used are let go."""
    server = ModelServer(["scripted"])
    new = {"op": "forward", "pair": "scripted", "role": "draft", "ids": [list(range(1, 201)) * 9], "cache": None,
           "use_cache": True}

    def reply(request) -> dict:
        replies = []
        server.serve(request, replies.append)
        return json.loads(replies[0])

    def held() -> int:
        actual = sum(cache.get_seq_length() for cache in server._caches.values())
        assert server._held == actual <= MAX_HELD, f"counted {server._held}, held {actual}, bound {MAX_HELD}"
        return actual

    first = reply(new)["cache"]
    assert held() == 1800
    reply({**new, "ids": [[5] * 300], "cache": first})
    assert held() == 2100, "a forward into a held cache grows what is held"
    clone = reply({"op": "clone", "cache": first})["cache"]
    reply({"op": "crop", "cache": clone, "length": -2000})  # keeps 100
    assert held() == 2200
    for _ in range(10):
        reply(new)
        held()
    assert "no cache" in refusal(server, {**new, "cache": first}), "the least recently used cache was let go first"


class Loopback:
    """A child's channel to `server` within this process: each request is served at once and its replies are read
    back in order; `events` collects the forwards the grader recorded."""

    def __init__(self, server: ModelServer):
        self.server, self.replies, self.events = server, collections.deque(), []

    def send_bytes(self, data: bytes) -> None:
        self.events += self.server.serve(json.loads(data), self.replies.append)

    def recv_bytes(self) -> bytes:
        return self.replies.popleft()


def test_a_stand_in_takes_and_returns_the_cache_as_its_model_does(monkeypatch):
    """A child's model takes the cache under each name the installed transformers takes (`cache` from 5.24, where
    `past_key_values` still works; only `past_key_values` before) and returns it where `cache_of` reads it, all
    without a warning; under a name its model would ignore the cache is ignored, as the model ignores it."""
    channel = Loopback(ModelServer(["scripted"]))
    monkeypatch.setattr(remote, "_channel", channel)
    model = remote.RemoteModel(zoo.materialize("scripted")[0], "scripted", "target")
    with nothing_warned():
        cache = cache_of(model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True))
        out = model(input_ids=torch.tensor([[4]]), **cache_kwargs(cache), use_cache=True)
    assert cache_of(out) is cache and cache.get_seq_length() == 4, f"the cache extended to 4 positions, got {cache}"
    taken = {"cache", "past_key_values"} if cache_kwargs(None) == {"cache": None} else {"past_key_values"}
    for name in ("cache", "past_key_values"):
        model(input_ids=torch.tensor([[5]]), **{name: cache}, use_cache=True)
        if name in taken:
            crop_to(cache, 4)
    got = [event["cached_tokens"] for event in channel.events if event.get("role") == "target"]
    assert got == [0, 3] + [4 if name in taken else 0 for name in ("cache", "past_key_values")], (
        f"positions each forward found in its cache: {got} (this transformers takes it as {sorted(taken)})"
    )
