"""The verdict's side inside a submission's sandbox: a host process that imports torch, transformers and the
student package once (never a submission's code), then forks one child per request of the grader. Each child
runs the submission's definitions and answers probe requests on a channel of its own, which the grader sends
with the request (a unix socket passed over the host's control socket, with one byte), and reads its start
message (the cells, whole, at any size) on that channel. Started by `host.py` as

    python -I host_main.py FD        # FD: the control socket to the grader

Nothing here is trusted: it runs with the submission, which can change any of it; the grader judges what comes
back (JSON only, size-capped) and holds the time limits. The kit's own side of the speed test runs the same host
outside any sandbox, with no submission (`baseline` requests).
"""

import json
import os
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection

PRELOAD = ("torch", "transformers", "specdec_kit.protocol.probes", "specdec_kit.checks", "specdec_kit.protocol.replay")


def main() -> None:
    for name in PRELOAD:
        __import__(name)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # tqdm's bars would take a lock that a killed child leaks
    control = socket.socket(fileno=int(sys.argv[1]))
    lock = threading.Lock()

    def say(line: bytes) -> None:
        with lock:
            control.sendall(line + b"\n")

    threading.Thread(target=_reap, args=(say,), daemon=True).start()
    say(b"ready")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1, 1)  # one byte, and the new child's channel
        except OSError:
            return
        if not message or not fds:
            return
        pid = os.fork()
        if pid == 0:
            control.close()
            conn = Connection(fds[0])
            _child(conn, json.loads(conn.recv_bytes()))  # the start message, framed: any size
            os._exit(0)
        for fd in fds:
            os.close(fd)
        say(json.dumps({"pid": pid}).encode())


def _reap(say) -> None:
    """Each child's exit status, said to the grader (which names a crash with it)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.1)
            continue
        say(json.dumps({"exited": pid, "status": os.waitstatus_to_exitcode(status)}).encode())


def _child(conn: Connection, start: dict) -> None:
    send, dumps = conn.send_bytes, json.dumps  # bound before any student code runs

    def emit(event: dict) -> None:
        send(dumps(event, default=str).encode())

    import resource

    from specdec_kit.protocol.probes import run_probe, set_threads
    from specdec_kit.protocol.replay import run_definitions

    os.setpgid(0, 0)
    if start["memory_mb"]:
        limit = start["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    set_threads(start["threads"])
    if start["served"]:  # before the submission's code: its decoders' models then run in the grading process
        from specdec_kit.protocol import remote

        remote.install(conn, {path: tuple(where) for path, where in start["served"].items()})
    module, problems = run_definitions([tuple(cell) for cell in start["cells"]])
    classes = [name for name, value in vars(module).items() if isinstance(value, type)]
    emit({"event": "loaded", "problems": problems, "classes": classes})
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if request["kind"] == "baseline":
            from specdec_course.sandbox.baseline import run_baseline  # the kit's side only: outside any sandbox

            run_baseline(request, emit)
            continue
        decoder_class = vars(module).get(request.get("class", ""))
        if not isinstance(decoder_class, type):
            emit({"event": "error", "method": request.get("class", ""), "kind": "NameError",
                  "message": f"the notebook defines no class {request.get('class')}"})
            emit({"event": "done"})
            continue
        run_probe(request, decoder_class, emit, capture=True)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    main()
