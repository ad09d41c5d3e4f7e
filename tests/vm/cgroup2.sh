#!/usr/bin/env bash
# The sandbox's cgroup v2 code on a real cgroup v2 kernel: a VM booted with cgroup_no_v1=all (virtme-ng, QEMU without
# KVM), which sees this checkout read-only and runs the v2 tests there, sandboxed processes included, then grades the
# solved notebook as `autograde-one` grades a class's submission (tests/vm/grade_solved.sh). By hand, not in CI: it
# needs root, QEMU and a kernel image, and takes minutes.
#   apt-get install -y qemu-system-x86 linux-image-amd64 busybox-static bubblewrap; pip install virtme-ng
#   make test-cgroup2                    # or: bash tests/vm/cgroup2.sh [/boot/vmlinuz-VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
kernel=${1:-$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)}
[ -n "$kernel" ] || { echo "no kernel under /boot: apt-get install linux-image-amd64, or pass its path" >&2; exit 2; }
command -v vng >/dev/null || { echo "no vng on PATH: pip install virtme-ng" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "no .venv: run make test first (packaging/install.sh)" >&2; exit 2; }
# In the VM: the v2 unit tests, the real-kernel test, and the sandbox's own cgroup tests (CI=1: failing, not skipped,
# where bubblewrap or the cgroup is missing), then the sandboxed grading. Nothing is written to the checkout (no
# caches, no bytecode); the grading writes to the VM's /tmp and to an overlay of $HOME (the zoo's cache, Jupyter's
# files) that the host never sees.
tests="tests/course/sandbox/test_processes.py tests/course/sandbox/test_box.py"
inside="cd '$PWD' && uname -r && grep cgroup /proc/self/mountinfo && \
SPECDEC_CGROUP2_VM=1 CI=1 PYTHONDONTWRITEBYTECODE=1 .venv/bin/python -m pytest -q -rA -p no:cacheprovider \
$tests -k 'processes or cgroup or frozen or outlives or shm' && \
PYTHONDONTWRITEBYTECODE=1 bash tests/vm/grade_solved.sh /tmp/cgroup2-grade"
started=$SECONDS
# QEMU reopens its stdout, which would truncate a log it is redirected to: its output goes through cat.
status=0
vng --disable-kvm --run "$kernel" --append cgroup_no_v1=all --cpus 2 --memory 4G --overlay-rwdir "$HOME" \
  -- "$inside" | cat || status=$?  # with pipefail: vng's status; `set -e` would end the script before the line below
echo "cgroup2 VM: kernel $(basename "$kernel"), status $status, $((SECONDS - started)) s"
exit "$status"
