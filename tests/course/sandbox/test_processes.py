"""A sandbox's cgroup (`specdec_course.sandbox.processes`): the host's layout read from /proc/self/mountinfo, and the
cgroup v2 leaf, against a fake root (a folder with the files a v2 kernel has). A real v2 kernel runs the same class
in tests/vm/cgroup2.sh (`make test-cgroup2`), by hand.

Example run: python -m pytest tests/course/sandbox/test_processes.py -q
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_course.sandbox import processes
from specdec_course.sandbox.processes import V1, V2, Cgroup2, find_hierarchy, layout

V2_MOUNTINFO = """\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 25 0:26 / {root} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""
HYBRID_MOUNTINFO = """\
31 23 0:28 / {root} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / {root}/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / {root}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
OWN = "0::/grader.scope\n"


def fake_cgroup(folder: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    """The files of a v2 cgroup a kernel would make in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in {"cgroup.controllers": controllers, "cgroup.subtree_control": "", "cgroup.procs": "",
                       "cgroup.freeze": "0", "cgroup.events": "populated 0\nfrozen 0\n", "cgroup.kill": "",
                       "memory.max": "max", "memory.swap.max": "max", "pids.max": "max",
                       "cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"}.items():
        (folder / name).write_text(text)
    return folder


def test_the_layout_is_read_from_mountinfo(tmp_path):
    assert layout(tmp_path, V2_MOUNTINFO.format(root=tmp_path)) == (V2, {V2: tmp_path}), \
        "a cgroup2 mount at the root is cgroup v2"
    version, mounts = layout(tmp_path, HYBRID_MOUNTINFO.format(root=tmp_path))
    assert version == V1, "a hybrid host (v1 controllers, a unified mount beside them) is used as v1"
    assert mounts == {"memory": tmp_path / "memory", "pids": tmp_path / "pids", "freezer": tmp_path / "freezer",
                      "cpuacct": tmp_path / "cpu,cpuacct"}, f"each v1 controller at its own mount: {mounts}"
    assert layout(tmp_path, V2_MOUNTINFO.format(root="/elsewhere")) == ("", {}), "no cgroup mount at the root: none"
    assert processes.own_cgroup("12:pids:/a\n0::/system.slice/x.scope\n") == "/system.slice/x.scope"


def test_v2_sandboxes_go_under_a_subtree_the_grader_makes_at_the_root(tmp_path):
    fake_cgroup(tmp_path)
    found = find_hierarchy(tmp_path, V2_MOUNTINFO.format(root=tmp_path), OWN)
    assert (found.version, found.places) == (V2, {V2: tmp_path / "specdec"}), found
    for folder in (tmp_path, tmp_path / "specdec"):
        assert (folder / "cgroup.subtree_control").read_text() == "+memory +pids +cpu", \
            f"memory, pids and cpu enabled for the children of {folder}"


def test_v2_falls_back_to_the_graders_own_delegated_cgroup(tmp_path):
    """Root's subtree_control refused (a systemd or a container's): the grader's own cgroup, its processes moved into
    a leaf first (a cgroup with processes enables no controller below it)."""
    fake_cgroup(tmp_path)
    (tmp_path / "cgroup.subtree_control").unlink()
    (tmp_path / "cgroup.subtree_control").mkdir()  # any write to it fails
    mine = fake_cgroup(tmp_path / "grader.scope", "memory pids")
    (mine / "cgroup.procs").write_text(f"{os.getpid()}\n")
    found = find_hierarchy(tmp_path, V2_MOUNTINFO.format(root=tmp_path), OWN)
    assert (found.version, found.places) == (V2, {V2: mine / "specdec"}), found
    assert (mine / "grader" / "cgroup.procs").read_text() == str(os.getpid()), "the grader moved into a leaf"
    assert (mine / "cgroup.subtree_control").read_text() == "+memory +pids", "no cpu where the kernel has none"
    again = find_hierarchy(tmp_path, V2_MOUNTINFO.format(root=tmp_path), "0::/grader.scope/grader\n")
    assert again.places == found.places, f"a second grader process, in the moved grader's leaf, shares it: {again}"


def test_v2_without_a_writable_cgroup_says_what_was_tried(tmp_path):
    fake_cgroup(tmp_path)
    (tmp_path / "cgroup.subtree_control").unlink()
    (tmp_path / "cgroup.subtree_control").mkdir()
    found = find_hierarchy(tmp_path, V2_MOUNTINFO.format(root=tmp_path), "0::/\n")
    assert found.version == "" and not found.places, found
    assert f"{tmp_path}/specdec could not be made" in found.reason and "own cgroup is that root" in found.reason, \
        f"the reason names both places tried: {found.reason}"
    fake_cgroup(tmp_path / "grader.scope", "io")
    found = find_hierarchy(tmp_path, V2_MOUNTINFO.format(root=tmp_path), OWN)
    assert found.version == "" and "offers no memory, pids controller" in found.reason, found.reason


@pytest.fixture
def leaf(tmp_path):
    """A v2 cgroup of one sandbox under a fake subtree, its files as the kernel makes them."""
    cgroup = Cgroup2("alice-kernel-1-0", memory_bytes=6 << 30, pids=512, places={V2: tmp_path})
    fake_cgroup(cgroup.folder)
    (cgroup.folder / "memory.max").write_text(str(6 << 30))  # what the constructor wrote, fake_cgroup reset
    (cgroup.folder / "pids.max").write_text("512")
    return cgroup


def test_v2_limits_are_written(tmp_path):
    cgroup = Cgroup2("bob", 1 << 30, 64, places={V2: tmp_path})
    assert (cgroup.folder / "memory.max").read_text() == str(1 << 30)
    assert (cgroup.folder / "pids.max").read_text() == "64"
    assert not (cgroup.folder / "memory.swap.max").exists(), "swap is capped only where the kernel accounts it"
    assert cgroup.procs_files() == [str(tmp_path / "bob" / "cgroup.procs")], "enter.py joins the one leaf"
    with pytest.raises(FileExistsError):  # never two sandboxes in one leaf
        Cgroup2("bob", 1 << 30, 64, places={V2: tmp_path})


def test_v2_swap_is_off_where_the_kernel_accounts_it(tmp_path):
    folder = tmp_path / "carol"

    class Kernel(type(tmp_path)):  # the leaf's files appear as mkdir makes it
        def mkdir(self, *args, **kwargs):
            super().mkdir(*args, **kwargs)
            fake_cgroup(Path(self))

    cgroup = Cgroup2("carol", 1 << 30, 64, places={V2: Kernel(tmp_path)})
    assert cgroup.folder == folder and (folder / "memory.swap.max").read_text() == "0", "no swap beyond memory.max"


def test_v2_cpu_freeze_and_attach(leaf, monkeypatch):
    assert leaf.cpu_seconds() == 2.5, "cpu.stat's usage_usec, in seconds"
    (leaf.folder / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    leaf.freeze()
    assert (leaf.folder / "cgroup.freeze").read_text() == "1"
    leaf.thaw()
    assert (leaf.folder / "cgroup.freeze").read_text() == "0"
    attached = processes.attach_cgroup({k: str(v) for k, v in leaf.dirs.items()})
    assert isinstance(attached, Cgroup2) and attached.folder == leaf.folder, "another grader process reaches it"
    assert processes.attach_cgroup({}) is None


def test_v2_freeze_waits_for_the_kernel_and_gives_up(leaf, monkeypatch):
    monkeypatch.setattr(processes, "SETTLE_SECONDS", 0.2)
    leaf.freeze()  # cgroup.events never says frozen 1: it returns after SETTLE_SECONDS
    assert (leaf.folder / "cgroup.freeze").read_text() == "1"


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_v2_kill_uses_cgroup_kill(leaf, sleeper, monkeypatch):
    monkeypatch.setattr(processes, "SETTLE_SECONDS", 0.2)
    (leaf.folder / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    assert leaf.pids() == [sleeper.pid]
    leaf.kill_all()
    assert (leaf.folder / "cgroup.kill").read_text() == "1", "cgroup.kill asked to kill every process"
    assert sleeper.poll() is None, "the kernel's cgroup.kill does the killing (the fake one kills nothing)"


def test_v2_kill_without_cgroup_kill_freezes_and_signals(leaf, sleeper, monkeypatch):
    monkeypatch.setattr(processes, "SETTLE_SECONDS", 0.2)
    (leaf.folder / "cgroup.kill").unlink()  # Linux before 5.14
    (leaf.folder / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    leaf.kill_all()
    assert sleeper.wait(5) == -9, "killed with SIGKILL"
    assert (leaf.folder / "cgroup.freeze").read_text() == "0", "thawed after, so that the kills land"
    assert leaf.pids() == [], "a killed process (a zombie) is not counted"


def test_no_cgroup_where_none_may_be_made(monkeypatch):
    monkeypatch.setattr(processes, "hierarchy", lambda: processes.Hierarchy("", "a read-only /sys/fs/cgroup", {}))
    assert processes.cgroup_support() == ("", "a read-only /sys/fs/cgroup")
    assert processes.make_cgroup("x", 0, 64) is None


@pytest.mark.skipif(os.environ.get("SPECDEC_CGROUP2_VM") != "1", reason="a real cgroup v2 kernel: tests/vm/cgroup2.sh")
def test_a_real_v2_kernel():
    """In the VM of tests/vm/cgroup2.sh: the leaf is made, counts CPU, freezes, and cgroup.kill ends everything."""
    import time

    assert processes.cgroup_support() == (V2, ""), processes.cgroup_support()
    cgroup = processes.make_cgroup("vm-test", 256 << 20, 64)
    assert isinstance(cgroup, Cgroup2) and (cgroup.folder / "pids.max").read_text().strip() == "64"
    spin = "import os\nos.fork()\nwhile True: pass"
    process = subprocess.Popen([sys.executable, "-c", f"open({cgroup.procs_files()[0]!r}, 'w').write('0')\n{spin}"])
    try:
        deadline = time.monotonic() + 60
        while len(cgroup.pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(cgroup.pids()) == 2, cgroup.pids()
        time.sleep(2)
        spent = cgroup.cpu_seconds()
        assert spent > 0.5, f"the spinning processes' CPU is counted: {spent}"
        cgroup.freeze()
        assert "frozen 1" in (cgroup.folder / "cgroup.events").read_text()
        frozen = cgroup.cpu_seconds()
        time.sleep(1)
        assert cgroup.cpu_seconds() - frozen < 0.05, "a frozen cgroup runs nothing"
        cgroup.thaw()
        cgroup.kill_all()
        assert cgroup.pids() == [] and process.wait(10) == -9, "cgroup.kill ended both"
        assert cgroup.cpu_seconds() >= frozen, "the count stays after its processes end"
    finally:
        process.kill()
        process.wait()
        cgroup.remove()
    assert not cgroup.folder.exists(), "its leaf is removed"
