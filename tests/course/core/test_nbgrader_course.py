"""Running nbgrader's commands (`specdec_course.core.nbgrader_course`): generate_assignment is bounded by the CPU its
processes use, which a loaded machine does not stretch, with the clock only as a backstop."""

import os
import signal
import subprocess
import threading
import time

import nbformat
import pytest

from specdec_course.core import nbgrader_course
from specdec_course.core.nbgrader_course import NbgraderError, generate_assignment, write_course_config
from specdec_kit.checks import core as checks_core

SOURCE = nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]))


@pytest.fixture
def course(tmp_path):
    write_course_config(tmp_path)
    return tmp_path


def test_generate_assignment_past_its_cpu_is_stopped_saying_so(course, monkeypatch):
    """nbgrader's start alone takes seconds of CPU: a limit of one second stops it (the clock's backstop moved out of
    the way, as a loaded machine may take longer than ten seconds to give it that second)."""
    monkeypatch.setattr(checks_core, "WALL_FACTOR", 1000)
    with pytest.raises(NbgraderError, match=r"stopped after 1 s of CPU"):
        generate_assignment(course, SOURCE, cpu_seconds=1)


@pytest.mark.slow
def test_generate_assignment_held_up_past_its_limit_on_the_clock_completes(course, monkeypatch):
    """A machine so loaded that nbgrader gets no core for longer than its limit (here: stopped for 25 s under a limit
    of 20) does not fail the set-up; with a limit on the clock it did."""
    started = []
    popen = subprocess.Popen

    def recorded(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(nbgrader_course.subprocess, "Popen", recorded)

    def hold_up():
        while not started:
            time.sleep(0.05)
        os.kill(started[0].pid, signal.SIGSTOP)
        time.sleep(25)
        os.kill(started[0].pid, signal.SIGCONT)

    holder = threading.Thread(target=hold_up)
    holder.start()
    released = generate_assignment(course, SOURCE, cpu_seconds=20)
    holder.join()
    assert nbformat.read(released, as_version=4).cells[0].source == "x = 1"
