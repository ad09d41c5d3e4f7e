"""The catalogue's measured losses, kept beside it (`autograder/losses.json`), so that CI checks every entry's `fails`
in seconds: what `catalogue --losses` found each entry to lose, and digests of everything that found it (the
solution, the hidden checks and config.toml, the code of every module of the kit the run imported (its syntax tree,
so that comments, docstrings and layout decide nothing) and the kit's data files (the visible checks' recorded
answers), torch's and transformers' versions, each entry's edits).

    record = measured_record(found, entries, solution, autograder_dir)   # after catalogue --losses ran them
    write_record(autograder_dir, record)
    report = check_record(entries, solution, autograder_dir)
    report.stale_inputs      # what changed since the record: every entry must be run again
    report.unrecorded        # entries whose edits the record has not seen (new or changed): run them again
    report.disagree          # entry -> why its `fails` are not what its checks lost

An entry agrees when its `fails` are the tests its checks lose, plus `test_speedup` where only the timing shows it.
Importing this module needs no nbgrader and no torch.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specdec_kit.checks.speed import SPEED_TEST

from .catalogue import Entry

RECORD = "losses.json"
COMMAND = "specdec-course catalogue --losses --record"
# What the checks of an entry read from the autograder folder (its entries are digested one by one).
AUTOGRADER_FILES = ("hidden.py", "config.toml")
PACKAGES = ("specdec_kit", "specdec_course")
# The commands' own code and the record's decide no loss.
NOT_INPUTS = ("specdec_course.commands", "specdec_course.cli", "specdec_kit.cli", __name__)
VERSIONS = ("torch", "transformers")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_digest(path: Path) -> str:
    """A module's code, without its comments, docstrings or layout: what it does, not how it reads."""
    tree = ast.parse(path.read_bytes())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return digest(ast.dump(tree).encode())


def edits_digest(entry: Entry) -> str:
    """What decides an entry's losses, of the entry itself: its edits to the solution."""
    return digest(json.dumps(entry.edits).encode())


def packages_root(package: str) -> Path | None:
    """The folder that holds `package` (src/ in a checkout), found without importing it."""
    spec = importlib.util.find_spec(package)
    return None if spec is None or spec.origin is None else Path(spec.origin).parent.parent


def module_file(name: str) -> Path | None:
    """The source file of module `name` of the kit's packages, found without importing it; None if it has none."""
    root = packages_root(name.split(".")[0])
    if root is None:
        return None
    base = root / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_modules() -> list[str]:
    """The kit's modules this process has imported, that a loss may depend on."""
    return sorted(name for name in sys.modules
                  if name.split(".")[0] in PACKAGES and not name.startswith(NOT_INPUTS) and module_file(name))


def data_files() -> list[str]:
    """The kit's files that are not code (the visible checks' recorded answers), as `package/.../name`."""
    return sorted(str(path.relative_to(root)) for package in PACKAGES if (root := packages_root(package))
                  for path in (root / package).rglob("*.json"))


def inputs(modules: list[str], data: list[str], solution: Path, autograder_dir: Path) -> dict[str, str]:
    """name -> digest (a version, for a library) of each input of the checks' run."""
    def of(path: Path | None, read=lambda path: digest(path.read_bytes())) -> str:
        return read(path) if path is not None and path.is_file() else "missing"

    found = {f"solution: {solution.name}": of(solution)}
    found.update({f"autograder: {name}": of(autograder_dir / name) for name in AUTOGRADER_FILES})
    found.update({f"module: {name}": of(module_file(name), code_digest) for name in modules})
    found.update({f"data: {name}": of(root / name if (root := packages_root(name.split("/")[0])) else None)
                  for name in data})
    for library in VERSIONS:
        found[f"version: {library}"] = importlib.metadata.version(library)
    return found


def timed_only(entry: Entry, lost: set[str]) -> set[str]:
    """Tests `entry` says it loses that its checks, which lost `lost`, cannot show: the speed test's timing."""
    return {SPEED_TEST} & entry.fails - lost


def agreement(entry: Entry, lost: set[str]) -> str | None:
    """Why `entry`'s fails are not the tests `lost` by its checks and those lost by timing alone; None where they
    are."""
    if entry.fails == lost | timed_only(entry, lost):
        return None
    return (f"its fails say {', '.join(sorted(entry.fails)) or 'nothing'}, its checks lose "
            f"{', '.join(sorted(lost)) or 'nothing'}" + (f" (its fails may add {SPEED_TEST}, lost by timing alone)"
                                                         if SPEED_TEST not in lost else ""))


def measured_record(found: dict[str, set[str]], entries: dict[str, Entry], solution: Path, autograder_dir: Path,
                    previous: dict | None = None) -> dict:
    """The record of `found` (entry -> the tests its checks lost), and of `previous`'s other entries still in the
    catalogue, which must have been measured on the same inputs."""
    now = inputs(imported_modules(), data_files(), solution, autograder_dir)
    kept = {}
    if previous is not None:
        if previous.get("inputs") != now:
            missing = sorted(set(entries) - set(found))
            if missing:
                raise ValueError(f"the checks' inputs changed since {RECORD} was written "
                                 f"({', '.join(changed(previous.get('inputs', {}), now))}): run every entry "
                                 f"(`{COMMAND}`), not only {', '.join(sorted(found))}")
        else:
            kept = {name: measured for name, measured in previous.get("entries", {}).items()
                    if name in entries and name not in found}
    measured = {name: {"edits": edits_digest(entries[name]), "loses": sorted(lost)} for name, lost in found.items()}
    return {"command": COMMAND, "inputs": now, "entries": dict(sorted({**kept, **measured}.items()))}


def changed(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    return sorted(name for name in recorded.keys() | now.keys() if recorded.get(name) != now.get(name))


def read_record(autograder_dir: Path) -> dict | None:
    path = autograder_dir / RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def write_record(autograder_dir: Path, record: dict) -> Path:
    path = autograder_dir / RECORD
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


@dataclass
class Report:
    stale_inputs: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # recorded entries the catalogue no longer has
    disagree: dict[str, str] = field(default_factory=dict)


def check_record(entries: list[Entry], solution: Path, autograder_dir: Path) -> Report:
    """The catalogue against its record, in seconds: no entry is run."""
    record = read_record(autograder_dir)
    if record is None:
        return Report(stale_inputs=[f"{autograder_dir / RECORD} does not exist"],
                      unrecorded=[entry.name for entry in entries])
    recorded = record.get("inputs", {})
    listed = {kind: [name.removeprefix(f"{kind}: ") for name in recorded if name.startswith(f"{kind}: ")]
              for kind in ("module", "data")}
    report = Report(stale_inputs=changed(recorded, inputs(listed["module"], listed["data"], solution,
                                                          autograder_dir)))
    measured = record.get("entries", {})
    report.gone = sorted(set(measured) - {entry.name for entry in entries})
    for entry in entries:
        seen = measured.get(entry.name)
        if seen is None or seen.get("edits") != edits_digest(entry):
            report.unrecorded.append(entry.name)
            continue
        why = agreement(entry, set(seen.get("loses", ())))
        if why is not None:
            report.disagree[entry.name] = why
    return report
