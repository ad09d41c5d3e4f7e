"""The check pairs' models run in the grading process (`specdec_course.served`), the grading child's decoders hold
stand-ins (`specdec_kit.remote`): the forwards the checks judge are what the grader ran, whatever the child says.

Example run: python -m pytest tests/course/test_served.py -q
"""

import json

import pytest

from specdec_course.isolation import Child, ChildRunner, Host
from specdec_course.served import MAX_CACHES, ModelServer
from specdec_kit import settings, zoo
from specdec_kit.adapters import cells_to_consider
from specdec_kit.checks import LocalRunner

from corpora import FORGE_FORWARDS, compiled_models, solved, with_cell

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


def test_a_child_without_served_models_has_no_forward_events(local):
    """The child's own forward events are never read: a child that is not served reports none (the timed child)."""
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
