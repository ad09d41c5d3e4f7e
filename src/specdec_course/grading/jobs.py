"""A batch's jobs, `workers` at a time, each in a daemon thread of its own with a backstop on the clock: a job that
has not finished by then is given up (its future fails with `JobTimedOut`) and the batch goes on, so one submission
never keeps a batch from its rows. Every wait of a job is bounded by its own limits (the notebook's run, the
verdict's budget); the backstop is set past all of them and is reached only if one of those bounds fails.

    for index, future in run_jobs([lambda: grade(a), lambda: grade(b)], workers=2, backstop=3600):
        future.result()            # the job's value, its exception, or JobTimedOut
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future


class JobTimedOut(TimeoutError):
    """A job ran past the batch's backstop; its thread is left to the process's end."""


def run_jobs(jobs: list[Callable], workers: int, backstop: float) -> Iterator[tuple[int, Future]]:
    """Each job's index and its finished future, in the order they finish (or are given up)."""
    done: queue.Queue[tuple[int, Future]] = queue.Queue()
    pending, running = list(range(len(jobs))), {}  # running: index -> when it started

    def work(index: int) -> None:
        future: Future = Future()
        try:
            future.set_result(jobs[index]())
        except Exception as e:  # the job's failure is its row's
            future.set_exception(e)
        done.put((index, future))

    while pending or running:
        while pending and len(running) < workers:
            index = pending.pop(0)
            running[index] = time.monotonic()
            threading.Thread(target=work, args=(index,), name=f"job {index}", daemon=True).start()
        first_due = min(running.values()) + backstop
        try:
            index, future = done.get(timeout=max(first_due - time.monotonic(), 0.0))
        except queue.Empty:
            index = min(running, key=running.get)
            future = Future()
            future.set_exception(JobTimedOut(f"its grading had not ended after {backstop:g} s on the clock"))
        if running.pop(index, None) is not None:  # a job given up that ends later is not reported again
            yield index, future
