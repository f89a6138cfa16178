"""distributed/run_lock.py: one run per workdir, nested holds, and the
folders a failed start made removed."""

import os

import pytest

from detector.distributed import run_lock
from detector.utils import workdir_lock


def test_held_inside_held_of_the_same_folder_does_nothing(tmp_path):
    with run_lock.held(tmp_path):
        with run_lock.held(tmp_path / "." / ""):  # the same folder
            assert (tmp_path / workdir_lock.LOCK_NAME).exists()
        assert (tmp_path / workdir_lock.LOCK_NAME).exists()  # still held
        with pytest.raises(workdir_lock.WorkdirLockedError):
            workdir_lock.WorkdirLock.acquire(tmp_path)
    assert not (tmp_path / workdir_lock.LOCK_NAME).exists()


def test_held_creates_the_folder_and_removes_it_when_left_empty(tmp_path):
    run = tmp_path / "a" / "run"
    with pytest.raises(RuntimeError), run_lock.held(run, create=True):
        assert run.is_dir()
        raise RuntimeError("a failed start")
    assert not (tmp_path / "a").exists()  # nothing left behind
    with run_lock.held(run, create=True):
        (run / "config.json").write_text("{}")
    assert sorted(os.listdir(run)) == ["config.json"]  # kept, unlocked
