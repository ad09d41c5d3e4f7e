"""The prompt set loads, holds the course's prompts, and bad files fail with what to fix."""

import json

import pytest

from specdec_kit.core.prompts import PromptsError, load_prompts

COURSE_PROMPTS = [
    "The future of Artificial Intelligence is",
    "Write a short story about a robot learning to feel emotions:",
    "Write the lyrics to the song 'Happy Birthday'.",
]


def test_kit_prompts_hold_the_course_prompts_and_categories():
    prompts = load_prompts()
    assert [p.text for p in prompts[:3]] == COURSE_PROMPTS, (
        f"the first three prompts should be the course's {COURSE_PROMPTS}, got {[p.text for p in prompts[:3]]}"
    )
    assert len(prompts) >= 12, f"the prompt set should hold at least 12 prompts, got {len(prompts)}"
    assert {"code", "factual", "list", "dialogue", "summary/repetition"} <= {p.category for p in prompts}, (
        "the prompts should cover the categories code, factual, list, dialogue and summary/repetition; "
        f"found {sorted({p.category for p in prompts})}"
    )


def write(tmp_path, data):
    path = tmp_path / "prompts.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


GOOD = {"id": "a", "category": "c", "text": "Hello", "max_new_tokens": 5}


@pytest.mark.parametrize("data,message", [
    ("{not json", "not valid JSON"),
    ({"prompts": []}, "non-empty list"),
    ([GOOD], "non-empty list"),
    ({"prompts": [{k: v for k, v in GOOD.items() if k != "text"}]}, "no 'text' field"),
    ({"prompts": [{**GOOD, "text": "   "}]}, "empty text"),
    ({"prompts": [{**GOOD, "max_new_tokens": "5"}]}, "must be a int"),
    ({"prompts": [{**GOOD, "max_new_tokens": 0}]}, "at least 1"),
    ({"prompts": [GOOD, GOOD]}, "unique"),
    ({"prompts": ["text"]}, "must be an object"),
])
def test_malformed_prompts_file(tmp_path, data, message):
    with pytest.raises(PromptsError, match=message):
        load_prompts(write(tmp_path, data))


def test_missing_prompts_file(tmp_path):
    with pytest.raises(PromptsError, match="does not exist"):
        load_prompts(tmp_path / "nope.json")
