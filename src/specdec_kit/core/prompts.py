"""The kit's prompt set (`data/prompts.json`), validated on load.

    from specdec_kit.core.prompts import load_prompts
    for prompt in load_prompts():          # the prompts shipped with the kit
        print(prompt.id, prompt.category, prompt.max_new_tokens)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

FIELDS = {"id": str, "category": str, "text": str, "max_new_tokens": int}


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str
    max_new_tokens: int


class PromptsError(ValueError):
    """A prompts file that cannot be used, with what to fix."""


def default_prompts_path() -> Path:
    """`data/prompts.json`: inside an installed wheel, or at the top of a source checkout."""
    packaged = resources.files("specdec_kit") / "data" / "prompts.json"
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "data" / "prompts.json"


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """Read and validate a prompts file: {"prompts": [{id, category, text, max_new_tokens}, ...]}."""
    path = Path(path) if path is not None else default_prompts_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise PromptsError(f"prompts file {path} does not exist; pass --prompts with a path to one") from None
    except json.JSONDecodeError as e:
        raise PromptsError(f"prompts file {path} is not valid JSON: {e}") from None
    entries = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PromptsError(f'{path}: expected an object with a non-empty list "prompts"')
    prompts = [_parse(entry, i, path) for i, entry in enumerate(entries)]
    ids = [p.id for p in prompts]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise PromptsError(f"{path}: prompt ids must be unique; repeated: {', '.join(duplicates)}")
    return prompts


def _parse(entry: object, index: int, path: Path) -> Prompt:
    where = f"{path}: prompt #{index}"
    if not isinstance(entry, dict):
        raise PromptsError(f"{where} must be an object with fields {', '.join(FIELDS)}")
    for field, kind in FIELDS.items():
        if field not in entry:
            raise PromptsError(f"{where} has no {field!r} field (needs {', '.join(FIELDS)})")
        if not isinstance(entry[field], kind) or isinstance(entry[field], bool):
            raise PromptsError(f"{where}: {field!r} must be a {kind.__name__}, got {entry[field]!r}")
    if not entry["text"].strip():
        raise PromptsError(f"{where} ({entry['id']!r}) has an empty text")
    if entry["max_new_tokens"] < 1:
        raise PromptsError(f"{where} ({entry['id']!r}): max_new_tokens must be at least 1")
    return Prompt(**{field: entry[field] for field in FIELDS})
