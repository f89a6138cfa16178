"""One run per workdir: the lock, its message, a dead holder's lock."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from detector.utils import workdir_lock
from tests.helpers import processes


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path):
    lock = workdir_lock.WorkdirLock.acquire(tmp_path)
    try:
        with pytest.raises(workdir_lock.WorkdirLockedError) as raised:
            workdir_lock.WorkdirLock.acquire(tmp_path)
    finally:
        lock.release()
    message = str(raised.value)
    assert message.startswith(
        f"--workdir={tmp_path}: another training run is using it (host "
        f"{socket.gethostname()} pid {os.getpid()}, started "
    )
    assert "\n" not in message
    assert not (tmp_path / workdir_lock.LOCK_NAME).exists()  # released
    workdir_lock.WorkdirLock.acquire(tmp_path).release()  # free again


def test_the_lock_of_a_killed_process_is_taken_over_with_a_log_line(
    tmp_path, caplog
):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from detector.utils import workdir_lock\n"
            f"workdir_lock.WorkdirLock.acquire({str(tmp_path)!r})\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
        ],
        cwd=processes.ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            workdir_lock.WorkdirLockedError, match=f"pid {holder.pid}"
        ):
            workdir_lock.WorkdirLock.acquire(tmp_path)
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # no chance to release
        holder.wait()
    record = json.loads((tmp_path / workdir_lock.LOCK_NAME).read_text())
    assert record["pid"] == holder.pid  # left behind
    with caplog.at_level("WARNING"):
        lock = workdir_lock.WorkdirLock.acquire(tmp_path)
    try:
        taken = [
            r.getMessage()
            for r in caplog.records
            if "taking over" in r.getMessage()
        ]
        assert len(taken) == 1
        assert f"pid {holder.pid}" in taken[0]
        mine = json.loads((tmp_path / workdir_lock.LOCK_NAME).read_text())
        assert mine["pid"] == os.getpid()
    finally:
        lock.release()


def test_held_inside_held_of_the_same_folder_does_nothing(tmp_path):
    with workdir_lock.held(tmp_path):
        with workdir_lock.held(tmp_path / "." / ""):  # the same folder
            assert (tmp_path / workdir_lock.LOCK_NAME).exists()
        assert (tmp_path / workdir_lock.LOCK_NAME).exists()  # still held
        with pytest.raises(workdir_lock.WorkdirLockedError):
            workdir_lock.WorkdirLock.acquire(tmp_path)
    assert not (tmp_path / workdir_lock.LOCK_NAME).exists()


def test_held_creates_the_folder_and_removes_it_when_left_empty(tmp_path):
    run = tmp_path / "a" / "run"
    with pytest.raises(RuntimeError), workdir_lock.held(run, create=True):
        assert run.is_dir()
        raise RuntimeError("a failed start")
    assert not (tmp_path / "a").exists()  # nothing left behind
    with workdir_lock.held(run, create=True):
        (run / "config.json").write_text("{}")
    assert sorted(os.listdir(run)) == ["config.json"]  # kept, unlocked
