# The two commands of the README, each installing what it needs into .venv first:
#   make demo     run the reference decoder over the kit's prompts on this machine's default pair
#   make test     lint, check the solution notebook is built from its .py, run the tests
# packaging/install.sh installs environment.yml's pins (the same script as Gradescope's and the image's).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test

$(STAMP): pyproject.toml environment.yml packaging/install.sh src/specdec_course/core/pins.py
	bash packaging/install.sh $(VENV)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specdec-kit demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/specdec-course build-notebook --check solutions/speculative_decoding.py
	$(VENV)/bin/specdec-course release --check
	$(PY) -m pytest -q -m "not slow"

# The slow tests CI runs: nbgrader, kernels and grading children, the timed verdict; both grading corpora graded as a
# class (the figures printed).
.PHONY: test-slow
test-slow: $(STAMP)
	$(PY) -m pytest -q -s -m "slow and not release" --durations=25

# Before a release, or after a change to packaging, the notebook or the grader's checks (CI has no room for it): the
# slow tests marked release (the kit installed from nothing as a student and as Gradescope does, the notebook and the
# student tree's commands run, the benchmark commands, the catalogue's messages), the transformers 4.x leg, the selftest.
.PHONY: test-release
test-release: $(STAMP)
	$(PY) -m pytest -q -s -m release --durations=10
	$(MAKE) test-transformers4
	$(MAKE) selftest

# The transformers 4.x leg: the decoder, crop_to and catalogue tests again on the newest 4.x (Colab may run 4.x).
TRANSFORMERS4 := 4.57.6
VENV4 := .venv4
STAMP4 := $(VENV4)/.installed

$(STAMP4): pyproject.toml environment.yml
	python3 -m venv $(VENV4)
	grep -v -E '^(transformers|tokenizers)==' $(VENV)/pins.txt > $(VENV4)/pins.txt  # 4.x wants an older tokenizers
	$(VENV4)/bin/python -m pip install -q -c $(VENV4)/pins.txt torch
	$(VENV4)/bin/python -m pip install -q -c $(VENV4)/pins.txt transformers==$(TRANSFORMERS4) -e '.[dev]'
	touch $(STAMP4)

.PHONY: test-transformers4
test-transformers4: $(STAMP) $(STAMP4)
	$(VENV4)/bin/python -m pytest -q -m "not slow" tests/kit/core/test_cache.py tests/course/core/test_oracle.py tests/kit/core/test_timing.py \
		tests/kit/test_exactness.py tests/kit/test_errors.py tests/course/selftest/test_catalogue.py

# By hand, as root, not in CI: the sandbox's cgroup v2 code and a sandboxed grading on a real v2-only kernel, in a VM
# (tests/vm/cgroup2.sh says what to install; without KVM about an hour: docs/benchmarks.md).
.PHONY: test-cgroup2
test-cgroup2: $(STAMP)
	bash tests/vm/cgroup2.sh

# The kit proves itself: real nbgrader autograding of the solution, the blank release and the catalogue.
.PHONY: selftest
selftest: $(STAMP)
	$(VENV)/bin/specdec-course selftest --jobs 2

# The same on a loaded machine: eight notebooks graded at once while six other autograde runs of the solved release
# share the cores (its figures in docs/benchmarks.md: about two hours on 2 cores, up to 20 GB of memory); no point may
# move.
.PHONY: selftest-load
selftest-load: $(STAMP)
	$(VENV)/bin/specdec-course selftest --jobs 8 --load 6

# The measured figures docs/benchmarks.md links, each page (and plot) written by the command that measured it into
# docs/figures/ (about 40 minutes on 2 idle cores; run it on a quiet machine, then commit docs/figures/).
FIGURES := docs/figures
.PHONY: figures
figures: $(STAMP)
	$(VENV)/bin/specdec-kit demo --out $(FIGURES)/demo
	$(VENV)/bin/specdec-course bench --pair synthetic-small --k 1,2,3,4,6 --repeats 2 --limit 8 --max-new-tokens 64 \
		--threads 2 --out $(FIGURES)/bench-greedy
	$(VENV)/bin/specdec-course bench --pair synthetic-small --k 1,2,4 --repeats 2 --limit 4 --max-new-tokens 48 \
		--threads 2 --temperatures 0.7,1.0 --methods target_greedy,hf_assisted,cached --out $(FIGURES)/bench-sampling
	$(VENV)/bin/specdec-course bench --pair synthetic-small --k 2,4,8 --repeats 2 --threads 2 \
		--methods target_greedy,cached,hf_prompt_lookup,prompt_lookup --out $(FIGURES)/bench-lookup
	$(VENV)/bin/specdec-course adaptive --pairs tiny,tiny-b,synthetic-small --k 1,2,3,4,6,8 --repeats 2 --limit 6 \
		--max-new-tokens 64 --threads 2 --out $(FIGURES)/adaptive
	$(VENV)/bin/specdec-course time-notebook --fresh-cache --record $(FIGURES)/notebook-times.json
	$(VENV)/bin/specdec-course time-notebook --record $(FIGURES)/notebook-times.json
	$(VENV)/bin/specdec-course time-notebook --finished --fresh-cache --record $(FIGURES)/notebook-times.json
	$(VENV)/bin/specdec-course time-notebook --finished --record $(FIGURES)/notebook-times.json

# Screenshots of what a student sees (each decoder's rounds, two bugs' feedback pages) for docs/students.md: about 3
# minutes, headless Chromium.
.PHONY: views
views: $(STAMP)
	$(PY) tests/views.py $(FIGURES)/views
