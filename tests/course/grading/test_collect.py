"""Collecting a class in the shapes LMSs and class folders give (folders, zips, tars; Canvas's, Moodle's and
Blackboard's download names, from the fixtures in lms_downloads/), refusing what is not a plain file, ids that differ
only in case, reading rosters, and keeping a class's rows across runs (grades.csv merged, replaced rows recorded,
finished students kept for a resumed batch).

Example run: python -m pytest tests/course/grading/test_collect.py -q
"""

import io
import os
import stat
import tarfile
import time
import unicodedata
import zipfile
from pathlib import Path

import nbformat
import pytest
from hypothesis import settings

from specdec_course.grading import batch, course, results
from specdec_course.grading.archives import ArchiveLimits
from specdec_course.grading.collect import Submission, collect, read_roster
from specdec_course.grading.names import LMS_SHAPES, UnknownName, marked_late
from specdec_course.grading.row import Grade, Graded

from conftest import REPO

DOWNLOADS = Path(__file__).parent / "lms_downloads"
DOWNLOADED_AT = 1_800_000_000  # 2027-01-15: the time an LMS's zip gives every entry, the download's
PROPERTY = settings(max_examples=300, deadline=None)  # a shared 2-core machine: no per-example deadline


def put(root: Path, relative: str, mtime: float | None = None) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def by_name(submissions: list[Submission]) -> dict[str, Submission]:
    return {s.name: s for s in submissions}


def download(root: Path, fixture: str) -> Path:
    """The files an LMS's download holds, named as lms_downloads/<fixture> lists them, each with the download's time."""
    for line in (DOWNLOADS / fixture).read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            put(root, line, mtime=DOWNLOADED_AT)
    return root


def test_every_shape_in_one_folder(tmp_path):
    """Flat files beside folders per student (any notebook name) and nbgrader's layout, Unicode kept."""
    put(tmp_path, "alice.ipynb")
    put(tmp_path, "frank/Speculative Decoding (1).ipynb")
    put(tmp_path, "Émilie/my work.ipynb")
    put(tmp_path, "gina/speculative_decoding/speculative_decoding.ipynb")
    put(tmp_path, "frank/.ipynb_checkpoints/Speculative Decoding (1)-checkpoint.ipynb")
    found = by_name(collect(tmp_path))
    assert sorted(found) == ["alice", "frank", "gina", "Émilie"], f"four students, checkpoints skipped: {sorted(found)}"
    assert found["frank"].path.name == "Speculative Decoding (1).ipynb", f"frank's notebook: {found['frank'].path}"
    assert found["Émilie"].student.isascii() and found["Émilie"].name == "Émilie", \
        f"the row keeps 'Émilie' and nbgrader gets an ASCII id: {found['Émilie']}"


def test_an_nbgrader_course_folder_is_read_from_its_submitted_tree(tmp_path):
    put(tmp_path, "submitted/frank/speculative_decoding/speculative_decoding.ipynb")
    put(tmp_path, "source/speculative_decoding/speculative_decoding.ipynb")
    found = by_name(collect(tmp_path))
    assert list(found) == ["frank"], f"only submitted/ holds submissions: {list(found)}"


def test_the_newest_of_two_downloads_is_graded_and_the_other_named(tmp_path):
    put(tmp_path, "henry.ipynb", mtime=2_000_000_000)
    put(tmp_path, "henry (1).ipynb", mtime=1_000_000_000)  # the browser's second download, whatever its time
    put(tmp_path, "ivy/first.ipynb", mtime=1_000_000_000)
    put(tmp_path, "ivy/second.ipynb", mtime=1_500_000_000)
    found = by_name(collect(tmp_path))
    assert found["henry"].path.name == "henry (1).ipynb" and found["henry"].superseded == ["henry.ipynb"], \
        f"the '(1)' download is the newer one; got {found['henry']}"
    assert found["ivy"].path.name == "second.ipynb" and found["ivy"].superseded == ["ivy/first.ipynb"], \
        f"without a suffix the later file time wins; got {found['ivy']}"
    assert found["ivy"].submitted_at.startswith("2017-07-14"), f"the file's time is kept: {found['ivy'].submitted_at}"


def test_a_zip_keeps_its_entries_times(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        entry = zipfile.ZipInfo("class/ana/notebook.ipynb", date_time=(2026, 12, 5, 23, 58, 0))
        zipped.writestr(entry, "{}")
        zipped.writestr("class/ben.ipynb", "{}")
    found = by_name(collect(archive, unpack_dir=tmp_path / "unpacked"))
    assert sorted(found) == ["ana", "ben"], f"a zip of one folder is that folder: {sorted(found)}"
    assert found["ana"].submitted_at[:10] in ("2026-12-05", "2026-12-06"), \
        f"ana's time is the zip entry's (23:58 local, in UTC): {found['ana'].submitted_at}"


def test_roster_students_missing_and_off_roster(tmp_path):
    put(tmp_path, "alice.ipynb")
    put(tmp_path, "zoe.ipynb")
    found = by_name(collect(tmp_path / ".", roster=["Alice", "Émilie"]))
    assert found["alice"].on_roster is True, f"roster ids match without regard to case: {found['alice']}"
    assert found["zoe"].on_roster is False, f"zoe is not on the roster and is marked so: {found['zoe']}"
    assert found["Émilie"].path is None and found["Émilie"].problem == "no submission", found["Émilie"]


def test_roster_csv_with_a_header_quoted_names_and_a_chosen_column(tmp_path):
    csv_file = tmp_path / "roster.csv"
    csv_file.write_text('name,student_id,email\n"Smith, Ann",ann01,a@x.org\n"Lee, Bo",bo02,b@x.org\n')
    assert read_roster(csv_file) == ["ann01", "bo02"], f"student_id is the id column: {read_roster(csv_file)}"
    assert read_roster(csv_file, "email") == ["a@x.org", "b@x.org"], "--roster-column picks the column"
    with pytest.raises(ValueError, match="not a column"):
        read_roster(csv_file, "login")
    plain = tmp_path / "roster.txt"
    plain.write_text("ann01\n\nbo02\n")
    assert read_roster(plain) == ["ann01", "bo02"], f"one id per line, blank lines skipped: {read_roster(plain)}"


def grade(student: str, score: float, status: str = "graded") -> Grade:
    return Grade(student, status, score=score, max_score=90, tests={"test_exact": score})


def test_merge_keeps_other_rows_and_records_each_replaced_one(tmp_path):
    path, cells = tmp_path / "grades.csv", ["test_exact"]
    first = [results.row(grade(s, p), None, cells) for s, p in (("amy", 90), ("bob", 0))]
    results.merge_rows(path, {}, first, cells, [])
    replaced = results.merge_rows(path, results.read_rows(path), [results.row(grade("bob", 45), None, cells)],
                                  cells, results.read_history(tmp_path / "regrades.csv"))
    rows = results.read_rows(path)
    assert replaced == ["bob"] and rows["amy"] == first[0], f"amy's row stays as it was: {rows['amy']}"
    assert rows["bob"]["score"] == "45", f"bob's row is the regrade's: {rows['bob']}"
    [old] = results.read_history(tmp_path / "regrades.csv")
    assert old["student"] == "bob" and old["score"] == "0" and old["replaced_at"], f"the old row is kept: {old}"


def test_a_resumed_batch_keeps_final_results_of_the_same_file_only(tmp_path):
    notebook = put(tmp_path, "amy.ipynb")
    amy = Submission("amy", notebook, submitted_at="2026-12-05T10:00:00+00:00")
    done = tmp_path / "done"
    results.save_done(done, Graded(grade("amy", 90), nbformat.v4.new_notebook(), {"test_exact": (90, None, False)}),
                      amy)
    kept = results.load_done(done, amy)
    assert isinstance(kept, Graded) and kept.grade.score == 90 and kept.scores == {"test_exact": (90, None, False)}, \
        f"a finished student is kept with the scores to write again: {kept}"
    resubmitted = Submission("amy", notebook, submitted_at="2026-12-06T10:00:00+00:00")
    assert results.load_done(done, resubmitted) is None, "a newer file is graded again"
    results.save_done(done, grade("amy", 0, status="timeout"), amy)
    assert results.load_done(done, amy) is None, "a timed-out student is graded again on resume"


def test_gradescope_export_names_students_and_times_from_its_metadata(tmp_path):
    put(tmp_path, "submission_101/notebook.ipynb", mtime=2_000_000_000)
    put(tmp_path, "submission_102/speculative_decoding.ipynb")
    put(tmp_path, "submission_103/speculative_decoding.ipynb", mtime=1_000_000_000)
    (tmp_path / "submission_metadata.yml").write_text(
        "submission_101:\n  :submitters:\n  - :name: Ann Smith\n    :sid: ann01\n    :email: ann@x.org\n"
        "  :created_at: 2026-12-05 20:00:00.000000000 -08:00\n"
        "submission_102:\n  :submitters:\n  - :name: Bo Lee\n    :email: bo@x.org\n"
        "  :created_at: 2026-12-06 01:30:00.000000000 -08:00\n"
        "submission_103:\n  :submitters:\n  - :name: Ann Smith\n    :sid: ann01\n"
        "  :created_at: 2026-12-05 23:00:00.000000000 -08:00\n")
    found = by_name(collect(tmp_path))
    assert sorted(found) == ["ann01", "bo@x.org"], f"the SID, else the email, names the student: {sorted(found)}"
    assert found["ann01"].path.parent.name == "submission_103" and found["ann01"].superseded == \
        ["submission_101/notebook.ipynb"], f"the later upload is graded whatever the file times: {found['ann01']}"
    assert found["bo@x.org"].submitted_at.startswith("2026-12-06T01:30:00"), \
        f"the upload time comes from the metadata: {found['bo@x.org'].submitted_at}"


def outside_solution(tmp_path: Path) -> Path:
    """A file outside the submissions, as the course's solution is: what a link would lead the grader to read."""
    solution = tmp_path / "course" / "solutions" / "speculative_decoding.ipynb"
    solution.parent.mkdir(parents=True)
    solution.write_text('{"cells": "the solution"}')
    return solution


def test_links_and_special_files_get_an_invalid_row_that_names_them(tmp_path):
    """A symbolic link (to a file or a folder), a hard link, a FIFO and a device are refused, each named in its
    student's row, and nothing of that student is graded; a plain notebook beside them is collected."""
    solution = outside_solution(tmp_path)
    root = tmp_path / "submissions"
    put(root, "honest.ipynb")
    (root / "linked.ipynb").symlink_to(solution)
    (root / "linked_folder").symlink_to(solution.parent, target_is_directory=True)
    put(root, "hard/notebook.ipynb").unlink()
    os.link(solution, root / "hard" / "notebook.ipynb")
    os.mkfifo(root / "piped.ipynb")
    put(root, "both/mine.ipynb")
    (root / "both" / "theirs.ipynb").symlink_to(solution)
    if os.geteuid() == 0:
        os.mknod(root / "device.ipynb", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
    found = by_name(collect(root))
    assert found["honest"].problem == "" and found["honest"].path == root / "honest.ipynb", found["honest"]
    expected = {"linked": "linked.ipynb is a symbolic link", "linked_folder": "linked_folder is a symbolic link",
                "hard": "hard/notebook.ipynb is a hard link", "piped": "piped.ipynb is a FIFO",
                "both": "both/theirs.ipynb is a symbolic link"}
    if os.geteuid() == 0:
        expected["device"] = "device.ipynb is a device"
    for name, words in expected.items():
        assert words in found[name].problem and "hand in the notebook itself" in found[name].problem, \
            f"{name}'s row names the entry and says what to do: {found[name].problem!r}"
    assert found["both"].superseded == ["both/mine.ipynb"], f"both's own notebook is named, not graded: {found['both']}"
    graded = batch.grade(tmp_path / "nbgrader", found["linked"], setup=None)
    assert graded.status == "invalid" and "symbolic link" in graded.message, \
        f"a refused entry's row is invalid and grading reads nothing of it: {graded}"


def tar_entry(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"{}"):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = kind, link, 1_800_000_000
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tar.gz", "w:gz"), (".tgz", "w:gz")])
def test_a_tar_is_unpacked_without_links_devices_or_paths_outside(tmp_path, suffix, mode):
    archive = tmp_path / f"class{suffix}"
    with tarfile.open(archive, mode) as tar:
        tar_entry(tar, "class/alice.ipynb")
        tar_entry(tar, "class/bob.ipynb", tarfile.SYMTYPE, "/root/solutions/speculative_decoding.ipynb")
        tar_entry(tar, "class/carl/notebook.ipynb", tarfile.LNKTYPE, "/etc/passwd")
        tar_entry(tar, "class/dan.ipynb", tarfile.FIFOTYPE)
        tar_entry(tar, "class/eve.ipynb", tarfile.CHRTYPE)
        tar_entry(tar, "class/../../fay.ipynb")
        tar_entry(tar, "/tmp/gus.ipynb")
        tar_entry(tar, "class/" + "h" * 300 + ".ipynb")
    unpacked = tmp_path / "unpacked"
    found = by_name(collect(archive, unpack_dir=unpacked))
    assert found["alice"].problem == "" and found["alice"].submitted_at.startswith("2027-01-15"), \
        f"a plain entry is collected with its time: {found['alice']}"
    for name, words in {"bob": "symbolic link", "carl": "hard link", "dan": "FIFO", "eve": "device",
                        "fay": "leads outside", "gus": "absolute name", "h" * 300: "longer than"}.items():
        assert words in found[name].problem, f"{name}'s row names what its entry is: {found[name].problem!r}"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written == [archive.name, "unpacked", "unpacked/class", "unpacked/class/alice.ipynb"], \
        f"only the plain entry is written, and only inside the unpack folder: {written}"
    assert not Path("/tmp/gus.ipynb").exists(), "an absolute entry is never written where it names"


def test_a_zip_link_entry_is_refused(tmp_path):
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("ana.ipynb", "{}")
        link = zipfile.ZipInfo("ben.ipynb")
        link.create_system, link.external_attr = 3, (stat.S_IFLNK | 0o777) << 16  # as `zip --symlinks` writes one
        zipped.writestr(link, "/root/solutions/speculative_decoding.ipynb")
    found = by_name(collect(archive, unpack_dir=tmp_path / "unpacked"))
    assert found["ana"].problem == "" and "ben.ipynb is a symbolic link" in found["ben"].problem, found
    assert not (tmp_path / "unpacked" / "ben.ipynb").exists(), "a link entry is not written, not even as a file"


@pytest.mark.parametrize("entries,words", [
    ({f"s{i}.ipynb": b"{}" for i in range(6)}, "more than 5 entries"),
    ({"big.ipynb": bytes(2 << 20)}, "more than 1 MB of files"),  # 2 MB of zeros: a few KB compressed
])
def test_an_archive_past_its_limits_is_one_row_and_nothing_is_unpacked(tmp_path, entries, words):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in entries.items():
            zipped.writestr(name, data)
    found = collect(archive, roster=["s0"], unpack_dir=tmp_path / "unpacked",
                    archive_limits=ArchiveLimits(megabytes=1, files=5))
    assert [(s.name, s.path) for s in found] == [("bomb", archive)] and words in found[0].problem, \
        f"one row, the archive's, saying why: {found}"
    assert not (tmp_path / "unpacked").exists(), "nothing of a refused archive is written"


def test_archive_limits_come_from_the_course_config(tmp_path):
    assert course.archive_limits(REPO / "autograder") == ArchiveLimits(4096, 10000), \
        "autograder/config.toml states 4096 MB and 10000 entries"
    config = (REPO / "autograder" / "config.toml").read_text()
    (tmp_path / "config.toml").write_text(config.replace("archive_mb = 4096", "archive_mb = 7")
                                          .replace("archive_files = 10000", "archive_files = 3"))
    assert course.archive_limits(tmp_path) == ArchiveLimits(7, 3), "[limits] archive_mb and archive_files"


def test_ids_that_differ_only_in_case_or_normalisation_are_two_students(tmp_path):
    """Bob and bob, and Émilie written composed and decomposed, are four rows with four ids, never merged; a roster
    matches each exactly, and regardless of case only where no other id is the same but for case."""
    composed, decomposed = unicodedata.normalize("NFC", "Émilie"), unicodedata.normalize("NFD", "Émilie")
    for name in ("Bob", "bob", composed, decomposed, "Carol"):
        put(tmp_path, f"{name}.ipynb")
    found = collect(tmp_path, roster=["Bob", "bob", "BOB", composed, "carol"])
    names = {s.name: s for s in found}
    assert {composed, decomposed, "Bob", "bob", "Carol", "BOB"} == set(names) and len(found) == 6, \
        f"five rows for five files and a missing one for BOB: {[s.name for s in found]}"
    ids = [s.student for s in found]
    assert len({i.casefold() for i in ids}) == len(ids), f"no two ids meet, even without case: {ids}"
    assert names["Bob"].on_roster and names["bob"].on_roster and names[composed].on_roster, \
        "an id on the roster as it is spelled is matched"
    assert names["Carol"].on_roster, "carol on the roster is Carol: no other id differs from it only in case"
    assert names[decomposed].on_roster is False, "the decomposed Émilie is not the roster's composed one"
    assert names["BOB"].path is None and names["BOB"].problem == "no submission", \
        f"BOB could be Bob or bob, so it matches neither: {names['BOB']}"


@pytest.fixture
def utc(monkeypatch):
    """This machine's clock in UTC: Blackboard's attempt times are read as local times."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_canvas_download_is_read_by_user_id_and_matches_the_gradebook_export(tmp_path):
    """Canvas's names give the user id, which the gradebook export's ID column holds; several files of one student
    are one row, the later attachment (or the "-1" copy) graded; `_LATE_` is kept; the zip's time is not taken for
    the upload's."""
    roster = read_roster(DOWNLOADS / "canvas_gradebook.csv")
    assert roster == ["101", "102", "103", "104"], f"the export's ID column, its Points Possible row skipped: {roster}"
    found = by_name(collect(download(tmp_path, "canvas.txt"), roster=roster))
    assert sorted(found) == roster, f"one row per user id, and Dae (104) missing: {sorted(found)}"
    ann, bo, emilie = found["101"], found["102"], found["103"]
    assert ann.path.name == "smithann_101_5007_Speculative Decoding (1).ipynb" and ann.superseded == \
        ["smithann_101_5001_speculative_decoding.ipynb"], f"the later attachment id is the later upload: {ann}"
    assert bo.path.name.endswith("-1.ipynb") and len(bo.superseded) == 1, f"Canvas's '-1' copy is the newer: {bo}"
    assert [marked_late(str(s.path)) for s in (ann, bo, emilie)] == [False, True, False], "Canvas's _LATE_ mark"
    assert {s.submitted_at for s in (ann, bo, emilie)} == {""}, \
        "a Canvas zip stamps every entry with the download's time: no upload time is made of it"
    assert all(s.on_roster for s in (ann, bo, emilie)) and found["104"].problem == "no submission", found


def test_canvas_anonymous_grading_names(tmp_path):
    put(tmp_path, "anon_Xy7Q2_5009_speculative_decoding.ipynb")
    put(tmp_path, "LATE_anon_Pq3Rs_5010_speculative_decoding.ipynb")
    found = by_name(collect(tmp_path))
    assert sorted(found) == ["anon_Pq3Rs", "anon_Xy7Q2"], f"the anonymous id is the student: {sorted(found)}"
    assert marked_late(str(found["anon_Pq3Rs"].path)) and not marked_late(str(found["anon_Xy7Q2"].path)), found


@pytest.mark.parametrize("fixture", ["moodle.txt", "moodle_flat.txt"])
def test_moodle_download_is_read_by_participant_id_and_matches_the_grading_worksheet(tmp_path, fixture):
    roster = read_roster(DOWNLOADS / "moodle_grading_worksheet.csv")
    assert roster == ["1234567", "1234568", "1234570"], f"'Participant 1234567' is participant 1234567: {roster}"
    found = by_name(collect(download(tmp_path, fixture), roster=roster))
    assert found["1234567"].on_roster and found["1234568"].on_roster, f"both match the worksheet: {found}"
    assert found["1234568"].path.name.endswith("Speculative Decoding (1).ipynb"), found["1234568"]
    assert found["1234570"].problem == "no submission", found["1234570"]
    assert all(not marked_late(str(s.path or "")) and s.submitted_at == "" for s in found.values()), \
        f"Moodle's names carry no late mark, and its zip's times are the download's: {found}"


def test_blackboard_download_keeps_the_latest_attempt_with_its_time(tmp_path, utc):
    roster = read_roster(DOWNLOADS / "blackboard_grade_center.csv")
    assert roster == ["ann01", "bo02"], f"the Grade Center's Username column: {roster}"
    found = by_name(collect(download(tmp_path, "blackboard.txt"), roster=roster))
    assert sorted(found) == ["ann01", "bo02"], f"the .txt details are not notebooks: {sorted(found)}"
    ann = found["ann01"]
    assert "2026-12-06-09-30-00" in ann.path.name and len(ann.superseded) == 1, f"the latest attempt: {ann}"
    assert ann.submitted_at == "2026-12-06T09:30:00+00:00", f"the attempt's time is the upload's: {ann}"
    assert ann.on_roster and not marked_late(str(ann.path)), "late is the attempt time against the deadline, at export"


def test_a_name_beside_an_lms_download_that_fits_no_shape_stops_with_the_way_out(tmp_path):
    download(tmp_path, "canvas.txt")
    put(tmp_path, "alice.ipynb")
    with pytest.raises(UnknownName) as raised:
        collect(tmp_path)
    message = str(raised.value)
    assert "'alice'" in message and "Canvas's download" in message and "--id-regex" in message, message
    assert all(shape.layout in message for shape in LMS_SHAPES), f"every shape tried is named: {message}"


@pytest.mark.parametrize("names,words", [
    (("hw_1_2_alice", "hw_1_2_bob"), "the attachment id 2 to both"),
    (("hw_1_2_alice", "lab_1_3_bob"), "the id '1' to both 'hw' and 'lab'"),
])
def test_names_that_only_look_like_canvas_are_not_merged_into_one_student(tmp_path, names, words):
    """Canvas writes one sortable name beside each user id and one file beside each attachment id."""
    for name in names:
        put(tmp_path, f"{name}.ipynb")
    with pytest.raises(ValueError, match=f"{words}.*--id-regex"):
        collect(tmp_path)
    found = by_name(collect(tmp_path, id_regex=r"_([a-z]+)$"))
    assert sorted(found) == ["alice", "bob"], f"--id-regex names them: {sorted(found)}"


def test_a_canvas_group_attachment_is_every_members(tmp_path):
    """A concluded course's download gives a group's one attachment to each member: each is a student."""
    put(tmp_path, "leebo_102_5003_speculative_decoding.ipynb")
    put(tmp_path, "kimdae_104_5003_speculative_decoding.ipynb")
    assert sorted(by_name(collect(tmp_path))) == ["102", "104"], "one row per member"


def test_id_regex_on_canvas_names_keeps_their_order_and_late_mark(tmp_path):
    download(tmp_path, "canvas.txt")
    found = by_name(collect(tmp_path, id_regex=r"^([a-zé]+)_"))
    assert sorted(found) == ["duboisémilie", "leebo", "smithann"], f"the regex names them: {sorted(found)}"
    assert "5007" in found["smithann"].path.name, f"Canvas's attachment order still picks the newest: {found}"
    assert marked_late(str(found["leebo"].path)), "the late mark stays Canvas's"
    assert marked_late("graded/unpacked/leebo_LATE_102_5003_speculative_decoding-1.ipynb"), "read from a path"
    assert not marked_late("graded/unpacked/Speculative Decoding_ann01_attempt_2026-12-06-09-30-00_x.ipynb")
