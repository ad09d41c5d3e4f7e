"""The channel between the grader and its grading children (`specdec_course.sandbox.host`): whole messages of any size,
hidden requests named in the grader's words, and the grader's own failures told apart from the submission's.

Example run: python -m pytest tests/course/sandbox/test_child.py -q
"""

import concurrent.futures
import os
import threading
import time

import pytest

from specdec_course.grading import batch, row
from specdec_course.sandbox import child as child_module
from specdec_course.sandbox import host
from specdec_course.sandbox.child import Child, ChildFailed, ChildRunner
from specdec_course.sandbox.host import GraderFailed, Host
from specdec_course.sandbox.models import ModelServer
from specdec_kit.checks.outcomes import MAX_TEXT, capped
from specdec_kit.core import settings
from specdec_kit.protocol.adapters import cells_to_consider

from corpora import long_docstrings

EIGHT_MB = 8 << 20
CHILDREN = pytest.mark.slow  # a grading child's host imports torch and transformers: seconds each


def child_with(cells: list[tuple[str, str]], models: ModelServer | None = None) -> Child:
    return Child(Host(None), cells, threads=settings.test_threads(), models=models)


@CHILDREN
def test_a_child_takes_definitions_of_eight_megabytes_whole():
    """A start message far past what one read of a stream socket returns (36 KB cut the course's one real student
    solution short) arrives whole: the child defines the class after 8 MB of docstring."""
    big = 'def explained():\n    """' + "speculative decoding, explained at length. " * (EIGHT_MB // 43) + '"""\n'
    cells = [("explained", big), ("decoder", "class Decoder:\n    pass\n")]
    assert sum(len(source) for _, source in cells) > EIGHT_MB
    child = child_with(cells)
    try:
        child.request({"kind": "load", "pair": "scripted", "class": "Nothing"}, seconds=120)
        assert child.load_problems == [] and {"Decoder"} <= set(child.classes), (child.load_problems, child.classes)
    finally:
        child.close()
        child.host.close()


@CHILDREN
def test_the_solution_with_a_hundred_kilobytes_of_docstrings_passes_from_a_child():
    """The corpus's long_docstrings (100 KB of docstrings and comments) loads and answers as the solution does."""
    from specdec_kit import checks

    cells = [(label, source) for _, label, source, _ in cells_to_consider(long_docstrings())]
    child = child_with(cells, ModelServer(["scripted"]))
    try:
        checks.check_verify_alignment(ChildRunner(child, "SpeculativeDecoder", seconds=120))
    finally:
        child.close()
        child.host.close()


@CHILDREN
def test_a_hidden_request_names_what_the_grader_called_not_what_the_child_said():
    """A child that announces a call of its own making (here: a hidden prompt's text) and hangs is named by the method
    the grader asked for."""
    sneaky = ("class Sneaky:\n    def __init__(self, *args, **kwargs):\n"
              "        import time\n        while True:\n            time.sleep(1)\n"
              "    from specdec_kit import probes as _p\n"
              "    _call = _p.call_student\n"
              "    def _announce(method, fn, *args, emit, describe='', _call=_call):\n"
              "        return _call(method, fn, *args, emit=emit, describe='the prompt the grader kept hidden')\n"
              "    _p.call_student = _announce\n")
    child = child_with([("sneaky", sneaky)])
    request = {"kind": "decode", "pair": "scripted", "cases": [["hidden text", 4, 2]]}
    try:
        with pytest.raises(ChildFailed) as shown:
            ChildRunner(child, "Sneaky", seconds=3).run(request)
        assert "kept hidden" in shown.value.method, "a visible request names the call the child announced"
        with pytest.raises(ChildFailed) as hidden:
            ChildRunner(child, "Sneaky", seconds=3, hidden=_Inputs()).run(request)
        assert hidden.value.method == "speculative_decode", hidden.value.method
    finally:
        child.close()
        child.host.close()


class _Inputs:
    def __init__(self):
        self.requests = []

    def add(self, request):
        self.requests.append(request)


def test_a_host_that_does_not_start_is_the_graders_failure(monkeypatch, tmp_path):
    """No student code runs in a host before it says it is ready: if it never does, the grader failed."""
    script = tmp_path / "broken_host.py"
    script.write_text("print('not ready', flush=True)\n")
    monkeypatch.setattr(host, "HOST_SCRIPT", script)
    child = child_with([("empty", "x = 1\n")])
    started = time.monotonic()
    with pytest.raises(GraderFailed, match="did not start"):
        child.request({"kind": "load", "pair": "scripted", "class": "X"}, seconds=30)
    assert time.monotonic() - started < 30
    child.host.close()


def test_a_grader_failure_is_an_error_row_that_says_how_to_grade_again(tmp_path):
    """Never a student's 0 with status graded: the row says the grader failed and names --student; the batch's count
    and the class report find it by its words."""
    future = concurrent.futures.Future()
    future.set_exception(GraderFailed("the grading child's host did not start"))
    submission = batch.Submission("alice", tmp_path / "alice.ipynb")
    grade = batch._result(future, submission, tmp_path / "logs")
    assert grade.status == "error" and grade.score == 0 and not grade.tests, grade
    assert row.is_grader_failure(grade.status, grade.message), grade.message
    assert "--student alice" in grade.message and "did not start" in grade.message, grade.message
    assert (tmp_path / "logs" / "alice.error.log").is_file()
    assert not row.is_grader_failure("error", "the notebook's own run could not start")


@CHILDREN
def test_each_event_a_child_sends_is_one_message():
    """The child's events are framed (a length before each): a json object of several megabytes is read whole, and
    the exception text it carries is cut to what a page holds."""
    big = "class Talker:\n    def __init__(self, *args, **kwargs):\n        raise ValueError('x' * (4 << 20))\n"
    child = child_with([("talker", big)])
    try:
        with pytest.raises(Exception) as raised:
            ChildRunner(child, "Talker", seconds=60).run({"kind": "load", "pair": "scripted"})
        # read whole (a cut message would not parse), then capped for the page
        assert raised.value.message == capped("x" * (4 << 20), MAX_TEXT), str(raised.value)[:200]
    finally:
        child.close()
        child.host.close()


HALF_MESSAGE = """class Half:
    def __init__(self, *args, **kwargs):
        import time
        from specdec_kit import remote
        remote._channel._send(b"\\x00\\x01\\x00\\x00{")  # announces 64 KB, sends one byte
        time.sleep(3600)
"""
UNREAD_REPLY = """class Deaf:
    def __init__(self, *args, **kwargs):
        import json, time
        from specdec_kit import remote
        remote._channel.send_bytes(json.dumps({"event": "model", "op": "forward", "pair": "tiny", "role": "target",
                                               "ids": [[1] * 512], "cache": None}).encode())
        time.sleep(3600)  # never reads the logits, megabytes past the socket's buffer
"""
NEVER_STARTS = """class Stuck:
    import time
    time.sleep(3600)
"""


FLOODS = """class Flood:
    def __init__(self, *args, **kwargs):
        from specdec_kit import remote
        while True:
            remote._channel.send_bytes(b'{"event": "%s", "method": "m", "role": "target"}')
"""


@CHILDREN
@pytest.mark.parametrize(("event", "kind", "words"), [
    ("call", "Flood", "messages for one request"),  # each kept: bounded in number
    ("forward", "Timeout", "did not return within 3 s"),  # each dropped: bounded by the child's time
])
def test_a_child_that_floods_tiny_messages_fails_its_request_in_bounded_time_and_memory(event, kind, words,
                                                                                        monkeypatch):
    """A child that sends small messages without end: the grader looks at the request's limit between messages,
    not only while the channel is silent, and keeps a bounded number of them."""
    child = Child(Host(None), [("flood", FLOODS % event)], threads=settings.test_threads(),
                  models=ModelServer(["tiny"]))
    try:
        started = time.monotonic()
        with pytest.raises(ChildFailed) as failed:
            ChildRunner(child, "Flood", seconds=3).run({"kind": "load", "pair": "scripted"})
        assert failed.value.kind == kind and words in failed.value.message, failed.value.message
        assert time.monotonic() - started < 60, "the grader read the flood past its limit"
    finally:
        child.close()
        child.host.close()


NOT_JSON = """class NotJson:
    def __init__(self, *args, **kwargs):
        from specdec_kit import remote
        remote._channel.send_bytes(b'{"event": "case", "index": ' + b"9" * 5000 + b"}")  # past Python's digits
"""


def test_the_grading_threads_waits_for_a_core_do_not_bring_the_backstop_nearer(monkeypatch):
    """The thread that reads a child's messages and serves its models is held up by a loaded machine as the child is
    (a flood of tiny messages, read by a grading thread given little of a core, met the clock's 30 s backstop before
    its own 3 s): that thread's waits for a core, the kernel's run delay read by its number (faked here), count out of
    the backstop; another thread's do not."""
    clock, waits = [100.0], {}
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(child_module, "run_delay", lambda pid, tid: waits.get((pid, tid)))
    child = child_with([])
    child._cpu, child._delay = (lambda: 0.0), (lambda: 0.0)  # a child that computes nothing and never waits
    meter = child._meter(3)
    this, other = (os.getpid(), threading.get_native_id()), (os.getpid(), threading.get_native_id() + 1)
    for _ in range(40):  # bytes moving for 40 s on the clock, this thread waiting for its core half of each second
        clock[0] += 1
        waits[this], waits[other] = waits.get(this, 0.0) + 0.5, waits.get(other, 0.0) + 0.4
        meter.active()
        assert meter.left() > 0, meter.why()
    assert abs(meter.held - 20) < 1e-6 and meter.idle == 0, (meter.held, meter.idle)


@CHILDREN
def test_a_message_that_is_not_json_fails_its_request_as_the_childs():
    """A message the grader cannot read as JSON (here an integer past the digits Python reads) is the child's broken
    protocol, named so, not a process that died."""
    child = Child(Host(None), [("not_json", NOT_JSON)], threads=settings.test_threads(), models=ModelServer(["tiny"]))
    try:
        with pytest.raises(ChildFailed) as failed:
            ChildRunner(child, "NotJson", seconds=30).run({"kind": "load", "pair": "scripted"})
        assert failed.value.kind == "Malformed" and "not JSON" in failed.value.message, failed.value.message
    finally:
        child.close()
        child.host.close()


@CHILDREN
@pytest.mark.parametrize(("cells", "class_name", "words"), [
    ([("half", HALF_MESSAGE)], "Half", "the grading child sent part of a message, then waited"),
    ([("deaf", UNREAD_REPLY)], "Deaf", "the grading child read part of the grader's message, then waited"),
    ([("stuck", NEVER_STARTS)], "Stuck", "the grading child sent nothing, then waited"),
], ids=["half_message", "unread_reply", "never_starts"])
def test_a_child_that_stalls_fails_its_request_and_never_blocks_the_grader(cells, class_name, words, monkeypatch):
    """Half a message then silence, a large reply never read, definitions that never end: each costs the request
    that waited, its time spent waiting on nothing, in words that say what the child left undone."""
    monkeypatch.setattr(child_module, "LOAD_SECONDS", 3)
    child = Child(Host(None), cells, threads=settings.test_threads(), models=ModelServer(["tiny"]))
    try:
        started = time.monotonic()
        with pytest.raises(ChildFailed) as failed:
            ChildRunner(child, class_name, seconds=3).run({"kind": "load", "pair": "scripted"})
        assert failed.value.kind == "Stalled" and words in failed.value.message, failed.value.message
        assert "waiting on nothing" in failed.value.message, failed.value.message
        assert time.monotonic() - started < 60, "the grader waited for the child past its limit"
    finally:
        child.close()
        child.host.close()
