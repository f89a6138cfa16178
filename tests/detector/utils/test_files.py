"""Files written whole or not at all."""

import errno
import os
import shutil
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


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_mid_write_names_the_file_and_keeps_the_old(
    tmp_path, monkeypatch
):
    path = tmp_path / "eval_val.detections.json"
    files.write_text(path, "[]")
    monkeypatch.setattr(os, "fsync", _disk_full)
    with pytest.raises(OSError) as error:
        files.write_text(path, "[1]")
    assert error.value.errno == errno.ENOSPC
    assert error.value.filename == str(path)
    assert error.value.strerror.startswith("No space left on device; ")
    assert error.value.strerror.endswith(" MiB free there")
    assert path.read_text() == "[]"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_files_larger_than_the_free_space_fail_before_any_is_written(
    tmp_path, monkeypatch
):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        shutil, "disk_usage", lambda _: usage._replace(free=1000)
    )
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    with pytest.raises(OSError) as error:
        files.check_space({first: 600, second: 600})
    assert error.value.filename == str(first)
    assert error.value.strerror == (
        "No space left on device: 0.0 MiB to write, 0.0 MiB free there"
    )
    files.check_space({first: 600})  # fits
    with pytest.raises(OSError) as error:
        files.write_bytes(second, b"x" * 2000)
    assert error.value.filename == str(second)
    assert list(tmp_path.iterdir()) == []
