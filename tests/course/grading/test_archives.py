"""Unpacking a class's archive (`specdec_course.grading.archives`), as properties over any entry names and kinds:
nothing is written outside the unpack folder, everything written is a plain file, every other entry is refused by name.

Example run: python -m pytest tests/course/grading/test_archives.py -q
"""

import io
import os
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_course.grading.archives import NAME_BYTES, ArchiveLimits, entry_path, unpack

PARTS = st.one_of(st.sampled_from(["..", ".", "", "a", "b", "c.ipynb", "h" * 300]), st.text(max_size=12))
NAMES = st.builds(lambda absolute, parts: "/" * absolute + "/".join(parts), st.booleans(),
                  st.lists(PARTS, min_size=1, max_size=4))
KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE,
                         tarfile.CHRTYPE])


@given(NAMES)
def test_a_name_goes_inside_the_folder_or_nowhere(name):
    path, problem = entry_path(name)
    if problem:
        return
    assert not path.is_absolute() and ".." not in path.parts and path.parts, f"{name!r} gave {path}"
    assert all(len(os.fsencode(p)) <= NAME_BYTES and "\0" not in p for p in path.parts), f"{name!r} gave {path}"
    assert path == PurePosixPath(*(p for p in name.split("/") if p not in ("", "."))), f"{name!r} gave {path}"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(NAMES, KINDS), max_size=8))
def test_unpacking_writes_plain_files_inside_only(entries):
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        archive = work / "class.tar"
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, kind in entries:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, "/etc/passwd"
                info.size = 2 if kind == tarfile.REGTYPE else 0
                tar.addfile(info, io.BytesIO(b"{}") if kind == tarfile.REGTYPE else None)
        with tarfile.open(archive) as tar:
            entries = [(m.name, m.type) for m in tar]  # the names as read back (tarfile drops a trailing "/")
        root, refused = unpack(archive, work / "unpacked", ArchiveLimits())
        outside = sorted(p.name for p in work.iterdir())
        assert outside == ["class.tar", "unpacked"], f"written beside the unpack folder: {outside}"
        written = [p for p in (work / "unpacked").rglob("*")]
        assert all(stat.S_ISDIR(p.lstat().st_mode) or (stat.S_ISREG(p.lstat().st_mode) and p.lstat().st_nlink == 1)
                   for p in written), f"only folders and plain files: {written}"
        plain = {entry_path(name)[0] for name, kind in entries if kind == tarfile.REGTYPE and not entry_path(name)[1]}
        files = {PurePosixPath(p.relative_to(work / "unpacked")) for p in written if p.is_file()}
        assert files <= plain, f"a file written that no plain entry names: {files - plain}"
        assert root == work / "unpacked" or root.parent == work / "unpacked", f"the root is the folder or in it: {root}"
        for name, kind in entries:
            if kind not in (tarfile.REGTYPE, tarfile.DIRTYPE) or entry_path(name)[1]:
                assert any(r.shown == repr(name) or r.path.name == PurePosixPath(name).name for r in refused), \
                    f"{name!r} ({kind!r}) is neither written nor refused: {refused}"
