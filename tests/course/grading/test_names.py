"""Whose file it is (`specdec_course.grading.names`): the student id in a file or folder name, by an LMS's shape or a
class folder's plain name, the ids nbgrader takes, and ids matched across a roster without merging two students.

Example run: python -m pytest tests/course/grading/test_names.py -q
"""

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_course.grading.names import (
    LMS_SHAPES,
    PLAIN_LAYOUT,
    UnknownName,
    id_key,
    match_ids,
    nbgrader_id,
    owner_of,
    read_lms_name,
    student_name,
)

PROPERTY = settings(max_examples=300, deadline=None)  # a shared 2-core machine: no per-example deadline


@pytest.mark.parametrize("stem,expected", [
    ("alice", "alice"), ("Copy of bob", "bob"), ("carol (1)", "carol"), ("Dan Smith", "Dan_Smith"),
    ("Émilie", "Émilie"), ("leebo_LATE_102_5003_speculative_decoding-1", "102"),
    ("Bo Lee_1234568_assignsubmission_file", "1234568"),
    ("Speculative Decoding_ann01_attempt_2026-12-06-09-30-00_speculative_decoding", "ann01"),
])
def test_student_name_from_a_file_or_folder_name(stem, expected):
    assert student_name(stem) == expected, f"{stem!r} should give the id {expected!r}, got {student_name(stem)!r}"


def test_student_name_regex():
    got = student_name("hw3_s1234567_final", r"_(s\d+)_")
    assert got == "s1234567", f"the regex's first group is the id: s1234567 expected, got {got}"
    with pytest.raises(ValueError, match="does not match"):
        student_name("x", r"(s\d+)")


def test_nbgrader_ids_are_ascii_and_never_collide():
    assert nbgrader_id("alice") == "alice", "a plain ASCII id is nbgrader's as it is"
    emilie, emile = nbgrader_id("Émilie"), nbgrader_id("Emilie")
    assert emilie.startswith("Emilie_") and emilie.isascii(), f"accents go, a hash marks it: {emilie!r}"
    assert emilie != emile, f"'Émilie' and 'Emilie' must not share an nbgrader id: {emilie!r}, {emile!r}"
    assert nbgrader_id("李华").startswith("student_"), f"a name with no ASCII letter still gets an id: " \
                                                       f"{nbgrader_id('李华')!r}"

@given(st.lists(st.sampled_from(["Bob", "bob", "BOB", "Émilie", unicodedata.normalize("NFD", "Émilie"), "ÉMILIE",
                                 "ann", "Ann", "zoe"]), max_size=6),
       st.lists(st.sampled_from(["Bob", "bob", "BOB", "Émilie", "émilie", "ann", "zed"]), max_size=6))
def test_matching_ids_never_merges_two(wanted, have):
    matched = match_ids(wanted, have)
    assert all(id_key(w) == id_key(h) for w, h in matched.items()), f"only ids the same but for case: {matched}"
    assert len(set(matched.values())) == len(matched), f"no two ids matched to one: {matched}"
    assert all(matched[w] == w for w in set(wanted) & set(have)), f"an id present on both sides is itself: {matched}"

# Any text, and text shaped as each LMS writes its names (Blackboard's with impossible dates among them).
NAMES = st.one_of(st.text(), *(st.from_regex(shape.regex, fullmatch=True) for shape in LMS_SHAPES))


@PROPERTY
@given(NAMES, st.sampled_from(["", "Canvas"]))
def test_any_name_maps_to_one_student_by_a_shape_or_to_the_clear_error(name, lms_download):
    """A name is read by the first shape that fits it, always the same way, or raises UnknownName naming every
    shape tried and --id-regex; nothing else escapes."""
    try:
        owner = owner_of(name, lms_download)
    except UnknownName as e:
        message = str(e)
        assert "--id-regex" in message and all(shape.layout in message for shape in LMS_SHAPES), message
        assert (PLAIN_LAYOUT in message) == (not lms_download), f"the plain shape is tried only alone: {message}"
        return
    assert owner.student and owner == owner_of(name, lms_download), f"one id, the same each time: {owner}"
    if owner.lms:
        assert owner == read_lms_name(name) and owner.student.removeprefix("anon_") in name, (name, owner)
    assert owner.lms or not lms_download, f"beside an LMS's names only an LMS's name is read: {owner}"
