"""Files written whole or not at all."""

import os
import stat

import pytest

from detector.utils import files


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "eval_val.json"
    files.write_text(path, '{"split": "val"}')
    assert path.read_text() == '{"split": "val"}'
    with pytest.raises(UnicodeEncodeError):
        files.write_text(path, "cut \ud800 here")  # fails mid-write
    assert path.read_text() == '{"split": "val"}'
    assert [p.name for p in tmp_path.iterdir()] == ["eval_val.json"]


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_written_files_take_the_process_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        files.write_text(tmp_path / "config.json", "{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "config.json").stat().st_mode)
    assert mode == 0o666 & ~mask


def test_a_symlink_at_the_path_is_replaced_not_written_through(tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("keep")
    link = tmp_path / "predictions.json"
    link.symlink_to(target)
    files.write_bytes(link, b"new")
    assert target.read_text() == "keep"
    assert not link.is_symlink() and link.read_bytes() == b"new"


def test_a_failed_write_names_the_file(tmp_path, monkeypatch):
    """A full disk fails in write or fsync, whose OSError names no file."""
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as error:
        files.write_bytes(tmp_path / "predictions.json", b"{}")
    assert error.value.filename == str(tmp_path / "predictions.json")
    assert error.value.errno == errno.ENOSPC


def test_a_write_larger_than_the_free_space_is_refused_first(
    tmp_path, monkeypatch
):
    import collections
    import errno
    import shutil

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10, 9, 1))
    with pytest.raises(OSError) as error:
        files.write_bytes(tmp_path / "a.png", b"0123456789")
    assert (error.value.errno, error.value.filename) == (
        errno.ENOSPC,
        str(tmp_path / "a.png"),
    )
    assert "10 bytes to write, 1 free" in error.value.strerror
    assert not list(tmp_path.iterdir())
