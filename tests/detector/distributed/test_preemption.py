"""The stop flag of SIGTERM/SIGINT, in a process of its own."""

import signal
import subprocess
import sys

import numpy as np

from detector.distributed import preemption
from tests.helpers import processes

# Installs the watch, signals itself once, reports, then signals again.
CHILD = """
import os, signal, sys, time
from detector.distributed import preemption
watch = preemption.Watch.install()
{begin}
print("before", watch.stop_requested(), flush=True)
os.kill(os.getpid(), signal.{name})
for _ in range(100):
    if watch.signum is not None:
        break
    time.sleep(0.01)
print("after", watch.stop_requested(), watch.signum, flush=True)
os.kill(os.getpid(), signal.{name})
time.sleep(10)
print("still running", flush=True)
"""


def _child(name: str, begin: bool = True) -> subprocess.CompletedProcess:
    begin_steps = "watch.begin_steps()" if begin else ""
    return subprocess.run(
        [sys.executable, "-c", CHILD.format(name=name, begin=begin_steps)],
        cwd=processes.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_first_signal_sets_the_flag_second_exits_at_once():
    # SIGINT twice is tested on train.py itself (tests/test_faults.py).
    done = _child("SIGTERM")
    assert done.returncode == 143, done.stderr
    assert done.stdout.splitlines() == [
        "before False",
        f"after True {int(signal.SIGTERM)}",
    ]
    assert "SIGTERM received: the run saves a checkpoint" in done.stderr
    assert "SIGTERM again: exiting at once, not saving" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_signal_before_the_steps_begin_exits_at_once_in_one_line():
    done = _child("SIGTERM", begin=False)
    assert done.returncode == 143, done.stderr
    assert done.stdout.splitlines() == ["before False"]
    assert done.stderr.strip().splitlines() == [
        "SIGTERM before the first step: exiting at once, nothing to save"
    ]


def test_preempted_says_the_step_and_the_exit_code_is_the_shells():
    stopped = preemption.Preempted(30, signal.SIGTERM)
    assert str(stopped) == "preempted at step 30: checkpoint saved"
    assert str(preemption.Preempted(0, signal.SIGINT)) == (
        "preempted before step 1: nothing to save"
    )
    assert preemption.exit_code(signal.SIGTERM) == 143
    assert preemption.exit_code(signal.SIGINT) == 130


def test_a_closed_terminal_saves_like_sigterm():
    """SIGHUP (the terminal closed) sets the flag: the step is saved."""
    done = _child("SIGHUP")
    assert done.returncode == 128 + signal.SIGHUP, done.stderr
    assert done.stdout.splitlines() == [
        "before False",
        f"after True {int(signal.SIGHUP)}",
    ]
    assert "SIGHUP received: the run saves a checkpoint" in done.stderr
    assert "Traceback" not in done.stderr


def test_one_process_stops_at_any_step_without_a_collective(monkeypatch):
    def no_collective(value):
        raise AssertionError("one process needs no collective")

    monkeypatch.setattr(
        preemption.multihost_utils, "process_allgather", no_collective
    )
    watch = preemption.Watch()
    assert not watch.stop_requested(agree=False)
    watch.signum = signal.SIGTERM
    assert watch.stop_requested(agree=False)
    assert watch.stop_requested()


def test_several_processes_agree_only_at_the_agreed_steps(monkeypatch):
    """Between agreement points no collective runs (and no host sync):
    a signalled process stops at the next point, with its peers."""
    gathered = []

    def allgather(value):
        gathered.append(int(value))
        return np.asarray([0, int(signal.SIGTERM)], dtype=np.int32)

    monkeypatch.setattr(preemption.jax, "process_count", lambda: 2)
    monkeypatch.setattr(
        preemption.multihost_utils, "process_allgather", allgather
    )
    watch = preemption.Watch()  # process 0: not signalled itself
    assert not watch.stop_requested(agree=False)
    assert gathered == []
    assert watch.stop_requested(agree=True)  # process 1 was signalled
    assert gathered == [0]
    assert watch.signum == signal.SIGTERM
