"""The sandbox a submission's code runs in (`specdec_course.sandbox.box`): what it can reach, and that nothing of it
outlives it. Needs root and bubblewrap (CI installs it); elsewhere these tests skip, saying why, and in CI they fail.

Example run: python -m pytest tests/course/sandbox/test_box.py -q
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specdec_course.sandbox import box as sandbox
from specdec_course.sandbox import processes
from specdec_course.sandbox.box import Limits, Sandbox

from conftest import REPO

requires_bwrap = pytest.mark.skipif(sandbox.detect() != "bwrap" and not os.environ.get("CI"),
                                    reason=f"no bubblewrap sandbox on this machine: {sandbox.why_not()}")
requires_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                                   reason="a sandbox's own uid needs root")


@pytest.fixture
def box():
    made = Sandbox("test", "bwrap", Limits(memory_mb=512))
    yield made
    made.close()


def run(box: Sandbox, code: str) -> subprocess.CompletedProcess:
    done = box.run([sys.executable, "-I", "-c", code], timeout=60)
    assert "Traceback" not in done.stderr, f"the probe itself failed in the sandbox:\n{done.stderr}"
    return done


@requires_bwrap
def test_the_course_is_out_of_sight(box):
    """The repository (hidden checks, solution, course), /root and the grader's processes are not there."""
    code = f"""
import os
for path in {[str(REPO / "autograder" / "hidden.py"), str(REPO / "solutions"), "/root/.bash_history"]!r}:
    print(path, os.path.exists(path))
print("processes", max(int(p) for p in os.listdir("/proc") if p.isdigit()))
"""
    out = run(box, code).stdout
    assert "True" not in out, f"the sandbox sees a path it must not:\n{out}"
    highest = int(out.split("processes ", 1)[1])
    assert highest < 10, f"the sandbox sees processes outside its own PID namespace (pid {highest})"


@requires_bwrap
def test_it_writes_only_its_folder_and_has_no_network(box):
    code = f"""
import os, socket
for path in {[os.path.join(sys.prefix, "evil.py"), str(REPO / "evil.txt")]!r}:
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as e:
        print("refused", path, e.errno)
open(os.path.join(os.environ["HOME"], "mine.txt"), "w").write("ok")
print("home", open(os.path.join(os.environ["HOME"], "mine.txt")).read())
print("uid", os.getuid())
try:
    socket.create_connection(("127.0.0.1", 22), timeout=2)
    print("network")
except OSError:
    print("no network")
"""
    out = run(box, code).stdout
    # The repository is not there: a write to its path lands in the sandbox's own /tmp or fails, never in it.
    assert f"wrote {sys.prefix}" not in out, f"the sandbox wrote into the Python environment:\n{out}"
    assert not (REPO / "evil.txt").exists(), f"the sandbox wrote into the repository:\n{out}"
    assert "home ok" in out and not (box.home / "mine.txt").exists(), \
        f"its own folder is writable, in its own space (not the grader's folder on disk):\n{out}"
    assert f"uid {box.uid}" in out and box.uid != 0, f"it runs as its own unprivileged uid:\n{out}"
    assert "no network" in out, f"the sandbox reached the network:\n{out}"


ATTEMPT = """
def attempt(what, act):
    try:
        act()
        print(what, "written", flush=True)
    except OSError as e:
        print(what, "refused", e.errno, e.strerror, flush=True)
"""
SPACE_PROBE = ATTEMPT + """
import os, sys
home = os.environ["HOME"]
def fill(path, megabytes):
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(bytes(1 << 20))
attempt("bytes", lambda: fill(os.path.join(home, "big"), 64))
attempt("tmp", lambda: fill("/tmp/big", 64))
os.remove(os.path.join(home, "big"))
os.remove("/tmp/big")
attempt("files", lambda: [open(os.path.join(home, f"f{i}"), "w").close() for i in range(500)])
attempt("runtime", lambda: fill(os.path.join(sys.argv[1], "big"), 64))
print("seeded", open(os.path.join(home, "notebook.ipynb")).read())
"""


def disk_tree(folder: Path) -> dict[str, int]:
    """Size of each file under `folder` on its disk (not in a memory file system mounted there)."""
    disk = folder.stat().st_dev
    return {str(p.relative_to(folder)): p.lstat().st_size for p in folder.rglob("*") if p.lstat().st_dev == disk}


@requires_bwrap
def test_a_sandbox_writes_within_its_space_and_never_on_the_graders_disk(tmp_path):
    """Its scratch folder and /tmp share one tmpfs of a byte and a file cap, the kernel's runtime folder a small one:
    a write past either cap fails in the sandbox's own code (ENOSPC), which goes on, and the grader's disk holds only
    what the grader put there (the seeded submission)."""
    (tmp_path / "notebook.ipynb").write_text("the submission")
    box = Sandbox("test-space", "bwrap", Limits(scratch_mb=8, scratch_files=100))
    try:
        box.seed(tmp_path)
        before, free = disk_tree(box.root), os.statvfs(box.root).f_bavail * os.statvfs(box.root).f_frsize
        out = box.run([sys.executable, "-I", "-c", SPACE_PROBE, str(box.runtime)], timeout=60)
        written = free - os.statvfs(box.root).f_bavail * os.statvfs(box.root).f_frsize
        after = disk_tree(box.root)
    finally:
        box.close()
    assert out.returncode == 0, f"the probe ran to its end:\n{out.stdout}\n{out.stderr}"
    for what in ("bytes", "tmp", "files", "runtime"):
        assert f"{what} refused 28" in out.stdout, f"{what}: a write past the cap is refused (ENOSPC):\n{out.stdout}"
    assert "seeded the submission" in out.stdout, f"the scratch folder starts as the submission:\n{out.stdout}"
    assert after == before, f"nothing the sandbox wrote is in its folder on the grader's disk: {after} != {before}"
    assert written < 32 << 20, f"the disk lost {written >> 20} MB while the sandbox tried to write 3 x 64 MB"


SHM_PROBE = ATTEMPT + """
import os
open(os.path.join(os.environ["HOME"], "half"), "wb").write(bytes(5 << 20))
attempt("bytes", lambda: open("/dev/shm/big", "wb").write(bytes(5 << 20)))
os.remove("/dev/shm/big")
attempt("files", lambda: [open(f"/dev/shm/f{i}", "w").close() for i in range(500)])
"""


@requires_bwrap
def test_dev_shm_is_inside_the_space_caps():
    """/dev/shm is the scratch tmpfs too (bubblewrap's own /dev/shm would be uncapped): its bytes count with the
    scratch folder's, its files with theirs."""
    box = Sandbox("test-shm", "bwrap", Limits(scratch_mb=8, scratch_files=100))
    try:
        out = box.run([sys.executable, "-I", "-c", SHM_PROBE], timeout=60)
    finally:
        box.close()
    assert out.returncode == 0, f"the probe ran to its end:\n{out.stdout}\n{out.stderr}"
    for what in ("bytes", "files"):
        assert f"{what} refused 28 No space left on device" in out.stdout, \
            f"{what}: /dev/shm past the scratch caps is refused:\n{out.stdout}"


@pytest.mark.slow
@requires_bwrap
def test_a_notebook_that_fills_its_space_fails_in_its_own_cells(tmp_path, monkeypatch):
    """A kernel in its sandbox, as grading runs it: the cell that writes past the byte cap and the one that makes files
    past the file cap fail with ENOSPC, the next cell runs, the grader's disk is untouched, and the row's note
    names both cells."""
    import nbformat
    from nbclient import NotebookClient

    from specdec_course.grading.notebook_run import space_notes
    from specdec_course.sandbox.kernel import SANDBOX_ENV, SandboxedKernelManager

    limits = Limits(memory_mb=2048, extra_memory_mb=1024, scratch_mb=16, scratch_files=200)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (
        "open('big', 'wb').write(bytes(64 << 20))",
        "import os\nos.remove('big')\nfor i in range(1000):\n    open(f'f{i}', 'w').close()",
        "print('the next cell ran')")])
    box = Sandbox("test-kernel-space", "bwrap", limits)
    try:
        before = disk_tree(box.root)
        monkeypatch.setenv(SANDBOX_ENV, box.describe())
        NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                       kernel_manager_class=SandboxedKernelManager).execute()
        after = disk_tree(box.root)
    finally:
        box.close()
    errors = [[o.get("evalue", "") for o in cell.outputs if o.output_type == "error"] for cell in notebook.cells]
    assert all(e and e[0].startswith("[Errno 28]") for e in errors[:2]), f"both cells fail with ENOSPC: {errors}"
    assert notebook.cells[2].outputs[0].get("text") == "the next cell ran\n", notebook.cells[2].outputs
    assert after == before, f"nothing of it is on the grader's disk: {after} != {before}"
    [note] = space_notes(notebook, limits)
    assert "ran out of its sandbox's space in cell 0, cell 1" in note and "16 MB in 200 files" in note, note


def test_the_space_caps_are_the_courses():
    from specdec_course.core.plan import load_plan
    from specdec_course.grading.verdict import sandbox_limits

    limits = sandbox_limits(load_plan(REPO / "autograder"))
    assert (limits.scratch_mb, limits.scratch_files) == (512, 10000), \
        f"[limits] scratch_mb and scratch_files of autograder/config.toml reach each sandbox: {limits}"


@requires_bwrap
def test_nothing_outlives_it():
    """A daemon started the way a notebook's `!` line would (new session, double fork) is gone after close."""
    box = Sandbox("test-daemon", "bwrap", Limits())
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(600)\n"
              "    os._exit(0)\ntime.sleep(600)\n")
    box.popen([sys.executable, "-I", "-c", daemon])
    deadline = time.monotonic() + 30
    while len(box.pids()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(box.pids()) >= 3, f"bwrap, the notebook's process and its daemon should run: {box.pids()}"
    uid = box.uid
    box.close()
    assert not processes.pids_of_uid(uid), "a process of the sandbox outlived it"


@requires_bwrap
def test_frozen_sandbox_does_not_run(box):
    """While the grader times its own side, the sandbox gets no CPU time."""
    box.popen([sys.executable, "-I", "-c", "while True: pass"])
    deadline = time.monotonic() + 60  # in its cgroup (a slow machine takes seconds): ticks before it joined don't count
    while not box.pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)

    def cpu_ticks() -> int:
        return sum(int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11]) for pid in box.pids())

    with box.frozen():
        before = cpu_ticks()
        time.sleep(1)
        after = cpu_ticks()
    assert after == before, f"a frozen sandbox ran for {after - before} ticks"


@requires_bwrap
def test_its_cgroup_counts_its_cpu_and_says_what_held():
    """The sandbox's cgroup (v1 or v2, whichever the host has) counts every process's CPU, those gone included, and
    `limits_held` names it."""
    version, why = processes.cgroup_support()
    assert version, f"no cgroup for the sandbox: {why}"
    box = Sandbox("test-cpu", "bwrap", Limits())
    try:
        assert box.limits_held == f"bwrap+{version}", box.limits_held
        assert box.cpu_seconds() == 0, f"a new sandbox has used no CPU: {box.cpu_seconds()}"
        spin = "import os, time\nchild = os.fork()\nwhile time.process_time() < 1: pass\nif child: os.wait()"
        assert box.run([sys.executable, "-I", "-c", spin], timeout=60).returncode == 0
        spent = box.cpu_seconds()
        assert spent >= 2.0, f"two processes, both ended, used 1 CPU second each: {spent}"
        assert Sandbox.attach(box.describe()).cpu_seconds() >= spent, "another grader process reads the same count"
    finally:
        box.close()


CAPS_PROBE = """
import threading, time
try:
    for _ in range(64):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
    print("threads started", flush=True)
except RuntimeError:
    print("threads refused", flush=True)
with open("/tmp/big", "wb") as f:  # the scratch tmpfs: memory of the cgroup's, beyond any process's RLIMIT_DATA
    for _ in range(256):
        f.write(bytes(1 << 20))
print("wrote 256 MB", flush=True)
"""


@requires_bwrap
def test_its_cgroup_caps_its_processes_and_memory_together():
    """pids caps threads, and memory.max (v2) or memory.limit_in_bytes (v1) what all of it holds: 256 MB written to
    its tmpfs, which no process's RLIMIT_DATA counts, gets it killed at 64 MB."""
    box = Sandbox("test-caps", "bwrap", Limits(memory_mb=64, pids=32, scratch_mb=512))
    try:
        out = box.run([sys.executable, "-I", "-c", CAPS_PROBE], timeout=60)
    finally:
        box.close()
    assert "threads refused" in out.stdout, f"64 threads past pids 32 are refused:\n{out.stdout}{out.stderr}"
    assert "wrote 256 MB" not in out.stdout and out.returncode != 0, \
        f"the cgroup's memory cap stops the writer:\n{out.stdout}{out.stderr}"


def test_limits_held_in_words():
    assert sandbox.limits_label("bwrap", "cgroup2") == "bwrap+cgroup2"
    assert sandbox.limits_label("user", "") == "user, no cgroup: per-process limits only"
    assert sandbox.limits_label("none", "cgroup1") == "none", "no sandbox: nothing of the sandbox's held"


def test_refused_without_a_sandbox(monkeypatch, tmp_path):
    """autograde on a machine with no sandbox stops before the first student and says what to do."""
    from specdec_course.grading import course

    monkeypatch.setattr(sandbox, "_detected", lambda: ("none", "grading is not running as root"))
    with pytest.raises(sandbox.SandboxError, match="--no-sandbox"):
        course.setup_batch(tmp_path / "course", REPO / "solutions" / "speculative_decoding.ipynb",
                                 REPO / "autograder")


@requires_bwrap
def test_only_a_kernels_sandbox_reads_the_check_pairs_weights(monkeypatch):
    """Weights restricted to the kernels' group: a kernel's sandbox reads them (its visible tests run the models), a
    verdict's cannot (its models run in the grading process, which counts every forward). The same holds without
    namespaces (file modes and groups): tests/course/platforms/test_gradescope.py grades under `user`."""
    root = Path(tempfile.mkdtemp(prefix="specdec-weights-", dir="/var/tmp"))  # reachable by any user, as a zoo is
    monkeypatch.setenv("SPECDEC_KIT_CACHE", str(root))  # bound into a bwrap sandbox as the zoo is
    folder = root / "pair" / "target"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    for path in (root, root / "pair", folder, folder / "config.json"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    sandbox.restrict_weights([root / "pair"])
    code = f"""
import os
for name in ("config.json", "model.safetensors"):
    try:
        open(os.path.join({str(folder)!r}, name), "rb").read()
        print("read", name)
    except OSError:
        print("refused", name)
"""
    seen = {}
    try:
        for weights in (True, False):
            box = Sandbox("test-weights", "bwrap", Limits(), weights=weights)
            try:
                seen[weights] = box.run([sys.executable, "-I", "-c", code], timeout=60).stdout
            finally:
                box.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert "read model.safetensors" in seen[True] and "read config.json" in seen[True], seen[True]
    assert "refused model.safetensors" in seen[False] and "read config.json" in seen[False], seen[False]


GRADER = """
import json, shutil, sys, time
from specdec_course.sandbox.box import Limits, Sandbox
from specdec_course.sandbox.processes import kill_uid, pids_of_uid
boxes = [Sandbox(f"grader-{i}", "user", Limits()) for i in range(int(sys.argv[1]))]
sleepers = [box.popen([shutil.which("sleep"), "120"]) for box in boxes]  # a program any uid may run
while not all(p.pid in pids_of_uid(box.uid) for box, p in zip(boxes, sleepers)):  # each has dropped to its uid
    time.sleep(0.02)
print(json.dumps({"uids": [box.uid for box in boxes], "pids": [p.pid for p in sleepers]}), flush=True)
for line in sys.stdin:
    if line.strip() == "kill":  # the cleanup where no cgroup is writable (a container): kill(-1) as each uid
        for box in boxes:
            kill_uid(box.uid)
        print("killed", flush=True)
    else:
        break
for box in boxes:
    box.close()
"""


def grader(boxes: int) -> subprocess.Popen:
    """Another grading process on this machine, opening `boxes` sandboxes (each running a sleeper) at once."""
    return subprocess.Popen([sys.executable, "-c", GRADER, str(boxes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def alive(pid: int) -> bool:
    return pid in {int(p) for p in os.listdir("/proc") if p.isdigit()} and processes.alive(pid)


@requires_root
def test_two_graders_at_once_share_no_uid_and_one_cleanup_spares_the_other():
    """Two graders open sandboxes at the same moment: no uid is in both, and one grader's cleanup by uid (kill(-1)
    as each of its uids, as a student may run it too) kills its own sandboxes' processes and none of the other's."""
    first, second = grader(8), grader(8)
    try:
        opened = [json.loads(g.stdout.readline()) for g in (first, second)]
        shared = set(opened[0]["uids"]) & set(opened[1]["uids"])
        assert not shared and all(len(set(o["uids"])) == 8 for o in opened), f"uids in both graders: {opened}"
        first.stdin.write("kill\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "killed", "the first grader's cleanup ran"
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in opened[0]["pids"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in opened[0]["pids"]), "the first grader's cleanup kills its own sleepers"
        spared = [pid for pid in opened[1]["pids"] if alive(pid)]
        assert spared == opened[1]["pids"], f"the other grader's sandboxes live on: {spared} of {opened[1]['pids']}"
    finally:
        for g in (first, second):
            g.communicate("close\n", timeout=60)


@requires_root
def test_a_crashed_graders_uids_are_freed_and_its_leftovers_killed():
    """A grader killed outright frees its uid with its lock; the next sandbox to take that uid first kills what the
    dead grader's sandbox left running (without namespaces nothing else would)."""
    crashed = grader(1)
    opened = json.loads(crashed.stdout.readline())
    [uid], [sleeper] = opened["uids"], opened["pids"]
    crashed.kill()
    crashed.wait()
    assert alive(sleeper), "without namespaces, a sandbox's process outlives its grader"
    boxes = []
    try:
        while not boxes or boxes[-1].uid != uid:
            assert len(boxes) < 16, f"uid {uid} stays held after its grader died: {[b.uid for b in boxes]}"
            boxes.append(Sandbox("after-crash", "user", Limits()))
        assert not alive(sleeper), f"what the dead grader left with uid {uid} is killed when the uid is taken again"
    finally:
        for box in boxes:
            box.close()


@requires_root
def test_the_uids_no_live_sandbox_holds_are_told_apart_from_held_ones():
    """`uids.unheld` (what `selftest --load` sweeps after its batches are killed) never names a uid a sandbox holds."""
    from specdec_course.sandbox import uids

    lease = uids.take()
    try:
        assert lease.uid not in uids.unheld(), f"uid {lease.uid} is held by this test's lease"
    finally:
        uids.give(lease)
    assert lease.uid in uids.unheld(), f"uid {lease.uid} is free once given back"


@requires_bwrap
def test_what_a_grader_killed_while_timing_left_frozen_is_killed_with_its_uid():
    """A grader killed while its sandbox was frozen (the speed test freezes it) leaves frozen processes, which no
    signal reaches until thawed: the cleanup of that uid thaws them first."""
    from specdec_course.sandbox.processes import kill_uid, pids_of_uid

    box = Sandbox("test-frozen-left", "bwrap", Limits())
    try:
        box.popen([sys.executable, "-c", "import time; time.sleep(600)"])
        deadline = time.monotonic() + 30
        while not box.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        box.cgroup.freeze()
        kill_uid(box.uid)
        assert not pids_of_uid(box.uid), f"frozen processes of uid {box.uid} outlived its cleanup"
    finally:
        box.close()
