"""Files written whole or not at all."""

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
