#!/usr/bin/env bash
# Inside the cgroup v2 VM (tests/vm/cgroup2.sh): the solved notebook graded as a class's submission is, sandboxed,
# by `specdec-course autograde-one`; its row must say `bwrap+cgroup2` and give every auto-graded point.
set -euo pipefail
out=${1:?usage: grade_solved.sh OUT_DIR}
mkdir -p "$out"
.venv/bin/python - "$out/solved.ipynb" <<'PY'
import sys
from pathlib import Path

import nbformat

from specdec_course.selftest.catalogue import Entry, make_submission

nbformat.write(make_submission(Path("solutions/speculative_decoding.ipynb"), Entry("solution", "")), sys.argv[1])
PY
# QEMU without KVM runs the guest 10-30 times slower than the host (the notebook's own run: 470 s against 30-40 s),
# and the limits count the CPU a check uses: the VM grades with every time limit of [limits] 20 times the course's,
# so that each allows the same work (this tests the isolation and the whole path's points, not the limits).
mkdir -p "$out/course-copy"
cp -r autograder assignment "$out/course-copy/"
.venv/bin/python - "$out/course-copy/autograder/config.toml" <<'PY'
import re
import sys
from pathlib import Path

path = Path(sys.argv[1])
scaled = re.sub(r"^((?:notebook|cell|check|verdict)_seconds = )(\d+)", lambda m: f"{m[1]}{int(m[2]) * 20}",
                path.read_text(), flags=re.M)
path.write_text(scaled)
PY
SPECDEC_SELFTEST=1 .venv/bin/specdec-course autograde-one "$out/solved.ipynb" --out "$out/graded" \
  --autograder "$out/course-copy/autograder" || { tail -n 40 "$out"/graded/logs/* 2>/dev/null; exit 1; }
status=0
.venv/bin/python - "$out/graded" <<'PY' || status=$?
import sys
from pathlib import Path

import pandas as pd

row = pd.read_csv(Path(sys.argv[1]) / "grades.csv").iloc[0]
print(row[["status", "score", "max_score", "isolation", "seconds", "vs_hf_assisted"]].to_string())
print("message:", row["message"])  # whole: the VM's files go with it
problems = [f"{name} is {row[name]!r}, not {want!r}" for name, want in
            (("status", "graded"), ("isolation", "bwrap+cgroup2"), ("score", row["max_score"])) if row[name] != want]
sys.exit("the sandboxed grading on cgroup v2: " + "; ".join(problems) if problems else 0)
PY
[ "$status" = 0 ] || tail -n 40 "$out"/graded/logs/* 2>/dev/null
exit "$status"
