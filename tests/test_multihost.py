"""Two processes x one CPU device on localhost: multi-host train and eval.

The processes start by hand (--coordinator_address, --num_processes,
--process_id) and talk through JAX's CPU collectives (gloo). Every process a
test starts runs in its own process group, killed when the test ends however
it ends.
"""

import json
import os
import pathlib
import re
import signal
import sys
import time
import types

import numpy as np
import pytest
from jax._src import distributed

from detector.distributed import peers
from tests.helpers import processes, requires
from tests.helpers.processes import SMOKE


def _succeeded(results: list[tuple[int, str]]) -> list[str]:
    for code, output in results:
        assert code == 0, output[-4000:]
    return [output for _, output in results]


def _error_lines(results: list[tuple[int, str]]) -> list[str]:
    """Each process's one `error:` line; no tracebacks."""
    lines = []
    for code, output in results:
        assert code == 1, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        errors = [
            line for line in output.splitlines() if line.startswith("error: ")
        ]
        assert len(errors) == 1, output[-3000:]
        lines += errors
    return lines


def _eval_summary(workdir: pathlib.Path) -> tuple[str, dict]:
    """(file name, contents) of the one eval summary; latency and the run's
    own paths left out."""
    found = sorted(
        path
        for path in workdir.glob("eval_*.json")
        if not path.name.endswith(".detections.json")
    )
    assert len(found) == 1, found
    summary = json.loads(found[0].read_text())
    summary.pop("predict_latency_ms_per_image")
    # Each run names its own data folder and checkpoint.
    assert summary.pop("checkpoint") == str(
        workdir / "checkpoints" / str(summary["step"])
    )
    summary.pop("root")
    return found[0].name, summary


def _assert_same_detections(got: pathlib.Path, want: pathlib.Path) -> None:
    """Same detections in the same order; boxes and scores within 1e-5."""
    got, want = (json.loads(path.read_text()) for path in (got, want))
    assert len(got) == len(want) > 0
    for key in ("image_id", "category_id", "segmentation"):
        assert [d[key] for d in got] == [d[key] for d in want], key
    for key in ("bbox", "score"):
        np.testing.assert_allclose(
            [d[key] for d in got],
            [d[key] for d in want],
            rtol=1e-5,
            err_msg=key,
        )


def _checkpoint_bytes(step_dir: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in step_dir.rglob("*") if f.is_file())


def _first_leg_beside_one_process(
    tmp_path: pathlib.Path, ref_steps: int, data: list[str] | None = None
) -> tuple[pathlib.Path, pathlib.Path, list[str]]:
    """Two processes train 2 steps (and evaluate) while one process on two
    devices trains `ref_steps`; returns (their workdir, the reference's,
    the two processes' arguments without num_steps).

    `data`: arguments naming data both runs read (default: a shapes set
    each writes)."""
    ref, run = tmp_path / "one_process", tmp_path / "two_processes"
    one_process = (
        [
            "train.py",
            *SMOKE,
            f"--workdir={ref}",
            *(data or [f"--config.data.root={tmp_path}/shapes_ref"]),
            f"--config.train.num_steps={ref_steps}",
        ],
        processes.env(devices=2),
    )
    leg = [
        *SMOKE,
        f"--workdir={run}",
        *(data or [f"--config.data.root={tmp_path}/shapes"]),
    ]
    # The 1-process run shares the two cores with the first leg.
    first_leg = processes.two_processes(
        "train.py", [*leg, "--config.train.num_steps=2"]
    )
    *results, reference = processes.run(
        [*first_leg, one_process], tmp_path / "logs_first"
    )
    _succeeded([*results, reference])
    # The checkpoint of step 2 was written once: one step folder, and as
    # many bytes as the 1-process checkpoint of the same state.
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["2"]
    assert _checkpoint_bytes(run / "checkpoints" / "2") == pytest.approx(
        _checkpoint_bytes(ref / "checkpoints" / "2"), rel=0.05
    )
    return run, ref, leg


def _assert_trained_and_evaluated_alike(
    run: pathlib.Path, ref: pathlib.Path, steps: list[int]
) -> None:
    """The same losses at every logged step (only process 0 writes), the
    same eval summary and every detection, not only the near-zero AP."""
    assert [line["step"] for line in processes.train_lines(run)] == steps
    for got, want in zip(
        processes.train_lines(run), processes.train_lines(ref), strict=True
    ):
        for name in (
            "total",
            "rpn_cls",
            "rpn_box",
            "cls",
            "box",
            "mask",
            "grad_norm",
        ):
            np.testing.assert_allclose(
                got[name],
                want[name],
                rtol=1e-5,
                err_msg=f"step {got['step']} {name}",
            )
    assert _eval_summary(run) == _eval_summary(ref)
    _assert_same_detections(
        run / "eval_val.detections.json", ref / "eval_val.detections.json"
    )


@pytest.mark.slow
@requires.modules(*requires.TRAIN_LOOP)
def test_two_processes_train_and_evaluate_like_one(tmp_path):
    run, ref, _ = _first_leg_beside_one_process(tmp_path, ref_steps=2)
    _assert_trained_and_evaluated_alike(run, ref, steps=[2])


@pytest.mark.slow
@requires.modules(*requires.TRAIN_LOOP)
def test_two_processes_train_resume_and_evaluate_like_one(tmp_path):
    run, ref, leg = _first_leg_beside_one_process(tmp_path, ref_steps=4)
    outputs = _succeeded(
        processes.run(
            processes.two_processes(
                "train.py", [*leg, "--config.train.num_steps=4"]
            ),
            tmp_path / "logs_second",
        )
    )
    for output in outputs:  # both processes restored step 2
        assert f"Resumed from {run}/checkpoints/2" in output
        assert "Data parallel over 2 cpu devices in 2 process(es)" in output
    _assert_trained_and_evaluated_alike(run, ref, steps=[2, 4])


@pytest.mark.slow
@requires.modules(*requires.TRAIN_LOOP)
def test_two_processes_train_on_two_canvases_like_one(tmp_path):
    """Orientation canvases: step 1 portrait, step 2 landscape; every
    process compiles both programs and runs the step's."""
    data = [
        *processes.grouped(tmp_path / "mixed"),
        "--config.train.log_every=1",
    ]
    run, ref, _ = _first_leg_beside_one_process(tmp_path, 2, data)
    for log in sorted((tmp_path / "logs_first").glob("*.log")):
        text = log.read_text()
        for canvas in ("128x64", "64x128"):
            assert f"train_step on {canvas}: no host round-trips" in text
    _assert_trained_and_evaluated_alike(run, ref, steps=[1, 2])


@pytest.mark.slow
@requires.modules(*requires.TRAIN_LOOP)
def test_mismatched_configs_fail_on_every_process_before_writing(tmp_path):
    run = tmp_path / "run"
    lines = _error_lines(
        processes.run(
            processes.two_processes(
                "train.py",
                [
                    *SMOKE,
                    f"--workdir={run}",
                    f"--config.data.root={tmp_path}/shapes",
                ],
                extra=["", "--config.train.num_steps=3"],
            ),
            tmp_path / "logs",
        )
    )
    for line in lines:
        assert line.startswith(
            "error: the config differs across processes: "
            "process 1 has config hash "
        )
    assert not run.exists()


@requires.modules(*requires.TRAIN_LOOP)
def test_batch_not_divisible_by_the_processes_is_one_line(tmp_path):
    lines = _error_lines(
        processes.run(
            processes.two_processes(
                "train.py",
                [
                    *SMOKE,
                    f"--workdir={tmp_path}/run",
                    f"--config.data.root={tmp_path}/shapes",
                    "--config.train.batch_size=3",
                ],
            ),
            tmp_path / "logs",
        )
    )
    expected = (
        "error: config.train.batch_size=3 must be a positive "
        "multiple of the number of devices (2 devices in 2 "
        "processes)"
    )
    assert lines == [expected, expected]
    assert not (tmp_path / "run").exists()


def test_process_0_whose_peer_never_joins_fails_in_one_line(tmp_path):
    address = f"localhost:{processes.free_port()}"
    alone = (
        [
            "train.py",
            *SMOKE,
            f"--workdir={tmp_path}/run",
            f"--config.data.root={tmp_path}/shapes",
            f"--coordinator_address={address}",
            "--num_processes=2",
            "--process_id=0",
            "--coordinator_timeout_s=3",
        ],
        processes.env(),
    )
    results = processes.run([alone], tmp_path / "logs")
    assert _error_lines(results) == [
        "error: --coordinator_timeout_s=3: not all 2 processes joined the "
        f"job at {address} within 3 s; start every process (ids 0..1) with "
        "the same --coordinator_address and --num_processes"
    ]
    assert "Fatal Python error" not in results[0][1]
    assert not (tmp_path / "run").exists()


def _wait_for_line(log: pathlib.Path, pattern: str, run, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(), re.MULTILINE):
            return
        assert run.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    pytest.fail(f"no {pattern!r} in {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
@requires.modules(*requires.TRAIN_LOOP)
def test_a_killed_peer_ends_the_survivor_in_one_line_and_resumes(tmp_path):
    """SIGKILL of process 1 after step 4's checkpoint: process 0 ends in one
    line naming it within the watch's bound; both restart from the last
    complete checkpoint and finish."""
    run = tmp_path / "run"
    leg = [
        *SMOKE,
        f"--workdir={run}",
        f"--config.data.root={tmp_path}/shapes",
        "--config.train.log_every=1",
    ]
    logs = tmp_path / "logs_killed"
    commands = processes.two_processes(
        "train.py", [*leg, "--config.train.num_steps=200"]
    )
    with processes.started(commands, logs) as (survivor, victim):
        _wait_for_line(logs / "0.log", r"^.*step 5/200", survivor, 300)
        os.killpg(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        code = survivor.wait(timeout=120)
        seconds = time.monotonic() - killed
    output = (logs / "0.log").read_text()
    assert code == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "error: " in line]
    assert len(errors) == 1, errors
    assert re.fullmatch(
        r"error: process 1 of 2 stopped answering for 1[5-9] s \(killed, "
        r"crashed or its host lost\); stopping this process too: start "
        r"every process again to resume from the last complete checkpoint",
        errors[0],
    ), errors
    assert seconds < peers.LOST_AFTER_S + 10, seconds
    # Complete checkpoints: a save cut short by the stop leaves orbax's
    # `<step>.orbax-checkpoint-tmp`, which the resume passes over.
    steps = sorted(
        int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()
    )
    assert steps and steps[-1] >= 4, steps
    last = steps[-1]
    outputs = _succeeded(
        processes.run(
            processes.two_processes(
                "train.py",
                [*leg, f"--config.train.num_steps={last + 2}"],
            ),
            tmp_path / "logs_resumed",
        )
    )
    for output in outputs:
        assert f"Resumed from {run}/checkpoints/{last}" in output


class _Store:
    """A stand-in for the coordination service's key-value store."""

    def __init__(self):
        self.values = {}

    def key_value_set(self, key, value, overwrite):
        self.values[key] = value

    def key_value_try_get(self, key):
        if key not in self.values:
            raise KeyError(key)
        return self.values[key]


def test_the_watch_names_a_silent_peer_and_ignores_an_exited_one():
    """The peer check alone, on a stand-in key-value store."""
    store = _Store()
    watch = peers.Watch(store, 0, 3, on_lost=None, lost_after_s=10)
    store.values["detector/peers/beat/1"] = "1"
    store.values["detector/peers/beat/2"] = "1"
    assert watch.check_once(100.0) is None
    store.values["detector/peers/exited/2"] = "1"
    assert watch.check_once(105.0) is None
    store.values["detector/peers/beat/1"] = "2"
    assert watch.check_once(108.0) is None  # moved: fresh again
    assert watch.check_once(117.0) is None
    assert watch.check_once(119.0) == peers.lost_message(1, 3, 11.0)
    assert "process 1 of 3 stopped answering for 11 s" in watch.check_once(
        119.0
    )


def test_a_lost_coordinator_is_named():
    class Gone:
        def key_value_set(self, *args):
            raise RuntimeError("UNAVAILABLE")

    watch = peers.Watch(Gone(), 1, 2, on_lost=None)
    assert watch.check_once(0.0).startswith(
        "process 0 of 2 (it hosts the coordinator) stopped answering"
    )


def test_a_finished_process_is_never_counted_lost_by_its_peers(monkeypatch):
    """`peers.finished` marks the process that `peers.watch` started."""
    store = _Store()
    job = types.SimpleNamespace(client=store, process_id=1, num_processes=2)
    monkeypatch.setattr(distributed, "global_state", job)
    monkeypatch.setattr(peers, "_active", [])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # put back after
    watch = peers.watch(on_lost=pytest.fail)
    try:
        peers.finished()
    finally:
        watch.stop()
    assert store.values["detector/peers/exited/1"] == "1"
    # Process 0 sees it exited, however long its counter stands still.
    survivor = peers.Watch(store, 0, 2, on_lost=None, lost_after_s=10)
    assert survivor.check_once(100.0) is None
    assert survivor.check_once(200.0) is None
