#!/usr/bin/env bash
# One install for every place the kit grades: CI and `make` (.venv), Gradescope's setup.sh and the grading
# image (packaging/Dockerfile).
#   bash packaging/install.sh VENV [EXTRAS]     EXTRAS default: dev,notebook,instructor
#   PYTHON=python3.11 bash packaging/install.sh VENV   the Python to build VENV with (default python3)
# A virtual environment at VENV with environment.yml's pins and the kit installed from this checkout. torch
# is installed first, by itself, so that pip keeps the build it finds (set PIP_INDEX_URL or PIP_FIND_LINKS to
# PyTorch's CPU wheels on a machine without a GPU, to skip the CUDA build's gigabytes).
set -euo pipefail
venv=${1:?usage: install.sh VENV [EXTRAS]}
extras=${2:-dev,notebook,instructor}
root=$(cd "$(dirname "$0")/.." && pwd)
"${PYTHON:-python3}" -m venv "$venv"
# environment.yml's pins as a constraints file, by the function that writes the student repository's constraints.txt
PYTHONPATH="$root/src" "${PYTHON:-python3}" -m specdec_course.core.pins "$root/environment.yml" "$venv/pins.txt"
"$venv/bin/python" -m pip install -q -c "$venv/pins.txt" torch
"$venv/bin/python" -m pip install -q -c "$venv/pins.txt" -e "$root[$extras]"
