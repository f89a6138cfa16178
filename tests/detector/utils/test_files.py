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
