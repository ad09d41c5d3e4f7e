"""The versions the course tested: environment.yml's exact pins, as a pip constraints file.

    constraints(Path("environment.yml"))    # the text of constraints.txt
    python3 -m specdec_course.core.pins environment.yml OUT    # writes it to OUT; packaging/install.sh runs this

The one reading of environment.yml for every install of the pins: packaging/install.sh (make, CI, Gradescope,
the grading image) and the published tree's constraints.txt, which the student README's commands and the
notebook's set-up cell pass to pip. Standard library only, Python 3.10 and newer: install.sh runs it with the
system's python3, before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ENVIRONMENT = Path(__file__).resolve().parents[3] / "environment.yml"
CONSTRAINTS_NAME = "constraints.txt"  # its name in the published tree
_PIN = re.compile(r"^\s*-\s*([A-Za-z0-9_.-]+)==(\S+)\s*$")  # `      - transformers==5.23.0`
HEADER = ("# The versions the course tested the kit with (its environment.yml). pip applies them to what it installs:\n"
          "#   pip install -c constraints.txt -e \".[notebook]\"\n")


def environment_pins(path: Path = ENVIRONMENT) -> dict[str, str]:
    """{package name, lower case: version} of every `name==version` line of `path`, in the file's order."""
    matches = (_PIN.match(line) for line in path.read_text().splitlines())
    return {m.group(1).lower(): m.group(2) for m in matches if m}


def constraints(path: Path = ENVIRONMENT) -> str:
    """The constraints file of `path`'s pins: a comment, then one `name==version` line per pin."""
    pins = environment_pins(path)
    if not pins:
        raise ValueError(f"{path} pins no package (no `- name==version` line)")
    return HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items())


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(constraints(Path(sys.argv[1])))
