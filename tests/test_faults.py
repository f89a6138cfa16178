"""Faults a real `train.py` process meets: signals, a second run, a full disk.

Each test starts train.py as a real process (tests/helpers/processes.py) on
the smoke config and delivers the fault from outside: a signal with
os.kill, a second process on the same workdir, a file-size limit that makes
the checkpoint writes fail, checkpoints/ a file.
"""

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import processes

for _module in ("tensorflow", "pycocotools", "clu"):
    pytest.importorskip(_module)

# A run long enough to be signalled mid-training; one line per step.
LONG = [
    *processes.SMOKE,
    "--config.train.num_steps=1000",
    "--config.train.log_every=1",
    "--config.train.checkpoint_every=1000",
]
LOSSES = ("total", "rpn_cls", "rpn_box", "cls", "box", "mask", "grad_norm")


def _wait_for(log: pathlib.Path, pattern: str, process, timeout=240) -> None:
    """Waits until the log of `process` matches `pattern`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")):
            return
        if process.poll() is not None:
            pytest.fail(
                f"ended ({process.returncode}) before {pattern!r}:\n"
                + log.read_text()[-3000:]
            )
        time.sleep(0.1)
    pytest.fail(
        f"no {pattern!r} within {timeout} s:\n" + log.read_text()[-3000:]
    )


def _train(tmp_path, workdir, *args):
    return (
        [
            "train.py",
            *LONG,
            f"--workdir={workdir}",
            f"--config.data.root={tmp_path}/shapes",
            *args,
        ],
        processes.env(),
    )


def _run_once(command, env, **kwargs) -> subprocess.CompletedProcess:
    """train.py `command` run to its end, its output captured."""
    return subprocess.run(
        [sys.executable, *command],
        cwd=processes.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=processes.TIMEOUT_S,
        **kwargs,
    )


def _preempted_step(code: int, output: str, signum: int) -> int:
    """The step of the one `preempted at step N` line; exit 128 + signum."""
    assert code == 128 + signum, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = re.findall(
        r"^preempted at step (\d+): checkpoint saved$", output, re.M
    )
    assert len(lines) == 1, output[-3000:]
    return int(lines[0])


@pytest.mark.slow
def test_sigterm_saves_the_step_and_a_second_run_is_refused(tmp_path):
    workdir = tmp_path / "run"
    logs = tmp_path / "logs"
    with processes.started([_train(tmp_path, workdir)], logs) as (first,):
        _wait_for(logs / "0.log", r"step 2/", first)
        # A second run on the same workdir: one line naming the holder.
        second = processes.run([_train(tmp_path, workdir)], tmp_path / "l2")
        ((code, output),) = second
        assert code == 1, output[-3000:]
        assert "Traceback" not in output
        errors = [x for x in output.splitlines() if x.startswith("error: ")]
        assert errors == [
            f"error: --workdir={workdir}: another training run is using it "
            f"(host {socket.gethostname()} pid {first.pid}, started "
            + errors[0].split(", started ", 1)[1]
        ], output[-3000:]
        assert first.poll() is None  # untouched, still training
        os.kill(first.pid, signal.SIGTERM)
        ((code, output),) = processes.finish([first], logs)
    step = _preempted_step(code, output, signal.SIGTERM)
    assert step >= 2
    # Saved at that step, completely; metrics up to it, from the first run.
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == [
        str(step)
    ]
    assert (
        workdir / "checkpoints" / str(step) / "_CHECKPOINT_METADATA"
    ).exists()
    assert [x["step"] for x in processes.train_lines(workdir)] == list(
        range(1, step + 1)
    )
    assert not (workdir / ".train.lock").exists()  # released at exit


# SIGINT (Ctrl-C, Python's KeyboardInterrupt) by default; SIGTERM, the
# same handler, behind -m slow, and by default in a child process of its
# own (tests/detector/distributed/test_preemption.py).
@pytest.mark.parametrize(
    "signum",
    [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGINT],
)
def test_a_signal_while_it_compiles_exits_at_once_saving_nothing(
    tmp_path, signum
):
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    with processes.started([_train(tmp_path, workdir)], logs) as (run,):
        # The main thread is inside XLA's compiler: the signal is still
        # taken at once, and there is nothing to save.
        _wait_for(logs / "0.log", r"Compiling the train step", run)
        os.kill(run.pid, signum)
        sent = time.monotonic()
        ((code, output),) = processes.finish([run], logs)
    assert time.monotonic() - sent < 5
    assert code == 128 + signum, output[-3000:]
    name = signal.Signals(signum).name
    assert [line for line in output.splitlines() if name in line] == [
        f"{name} before the first step: exiting at once, nothing to save"
    ]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert not list((workdir / "checkpoints").glob("*"))
    assert not (workdir / "config.json").exists()


# Behind -m slow: it waits for step 1. The default suite keeps the rule in
# process (test_preemption.py, first signal sets the flag, the second exits)
# and the process-level signal before step 1 above.
@pytest.mark.slow
def test_a_second_signal_exits_at_once(tmp_path):
    logs = tmp_path / "logs"
    with processes.started([_train(tmp_path, tmp_path / "run")], logs) as (
        run,
    ):
        _wait_for(logs / "0.log", r"step 1/", run)
        os.kill(run.pid, signal.SIGINT)
        _wait_for(logs / "0.log", r"SIGINT received", run, timeout=10)
        os.kill(run.pid, signal.SIGINT)
        sent = time.monotonic()
        ((code, output),) = processes.finish([run], logs)
    assert time.monotonic() - sent < 5
    assert code == 130, output[-3000:]
    assert "SIGINT again: exiting at once, not saving" in output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output


@pytest.mark.slow
def test_a_workdir_deleted_mid_run_ends_it_in_one_line(tmp_path):
    """Noticed at the next log step (every 3rd), not at the end of the
    run: it once ended `trained W to step 60`, exit 0, with nothing left."""
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    command = _train(tmp_path, workdir, "--config.train.log_every=3")
    with processes.started([command], logs) as (run,):
        _wait_for(logs / "0.log", r"step 3/", run)
        for _ in range(10):  # the run may add a file as it goes
            shutil.rmtree(workdir, ignore_errors=True)
            if not workdir.exists():
                break
        ((code, output),) = processes.finish([run], logs)
    assert code == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [x for x in output.splitlines() if x.startswith("error: ")]
    assert errors == [
        f"error: --workdir={workdir}: {workdir}/config.json is gone: the "
        "workdir was deleted, moved or replaced while the run trained, and "
        "its checkpoints and metrics with it; train again into a workdir "
        "that stays"
    ], output[-3000:]
    last = max(map(int, re.findall(r"step (\d+)/1000", output)))
    assert last < 100, last  # within a few log steps of the deletion
    assert not workdir.exists()


def _assert_same_losses(workdir, straight, steps) -> None:
    """The losses of every training line of `workdir` and `straight`,
    bit-identical on CPU, at `steps`."""
    got, want = (processes.train_lines(w) for w in (workdir, straight))
    assert [x["step"] for x in got] == list(steps)
    for a, b in zip(got, want, strict=True):
        for name in LOSSES:
            np.testing.assert_allclose(
                a[name], b[name], rtol=1e-6, err_msg=name
            )


@pytest.mark.slow
def test_resume_after_sigterm_equals_an_uninterrupted_run(tmp_path):
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    with processes.started([_train(tmp_path, workdir)], logs) as (first,):
        _wait_for(logs / "0.log", r"step 2/", first)
        os.kill(first.pid, signal.SIGTERM)
        ((code, output),) = processes.finish([first], logs)
    step = _preempted_step(code, output, signal.SIGTERM)
    end = [f"--config.train.num_steps={step + 3}"]
    resumed = processes.run([_train(tmp_path, workdir, *end)], tmp_path / "l2")
    straight = processes.run(
        [_train(tmp_path, tmp_path / "straight", *end)], tmp_path / "l3"
    )
    for code, output in (*resumed, *straight):
        assert code == 0, output[-3000:]
    assert f"Resumed from {workdir}/checkpoints/{step}" in resumed[0][1]
    _assert_same_losses(workdir, tmp_path / "straight", range(1, step + 4))


@pytest.mark.slow
def test_resume_after_sigkill_on_two_canvases_equals_an_uninterrupted_run(
    tmp_path,
):
    """Orientation canvases: a run killed at once (SIGKILL, nothing saved
    at the kill) resumes from its last intact checkpoint and trains, on
    both canvases, what a run never stopped trains."""
    data = processes.grouped(tmp_path / "mixed")
    end = 6  # steps 1 and 5 portrait, the rest landscape

    def train(workdir, steps):
        return (
            [
                "train.py",
                *processes.SMOKE,
                *data,
                f"--workdir={workdir}",
                f"--config.train.num_steps={steps}",
                "--config.train.log_every=1",
            ],
            processes.env(),
        )

    workdir, logs = tmp_path / "run", tmp_path / "logs"
    commands = [train(workdir, 1000), train(tmp_path / "straight", end)]
    with processes.started(commands, logs) as (killed, straight):
        _wait_for(logs / "0.log", r"step 3/", killed)
        saved = workdir / "checkpoints" / "2" / "_CHECKPOINT_METADATA"
        deadline = time.monotonic() + 60
        while not saved.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.killpg(killed.pid, signal.SIGKILL)
        outputs = processes.finish([killed, straight], logs)
    assert outputs[1][0] == 0, outputs[1][1][-3000:]
    for _, text in outputs:  # both programs before step 1
        for canvas in ("128x64", "64x128"):
            assert f"train_step on {canvas}: no host round-trips" in text
    ((code, output),) = processes.run([train(workdir, end)], tmp_path / "l2")
    assert code == 0, output[-3000:]
    resumed = re.findall(rf"Resumed from {workdir}/checkpoints/(\d+)", output)
    assert resumed and 2 <= int(resumed[0]) < end, output[-3000:]
    _assert_same_losses(workdir, tmp_path / "straight", range(1, end + 1))


@pytest.mark.slow
def test_two_processes_stop_at_the_same_step_when_one_is_signalled(tmp_path):
    """They agree on log steps only (every 3rd): no collective between."""
    workdir, logs = tmp_path / "run", tmp_path / "logs"
    commands = processes.two_processes(
        "train.py",
        [
            *LONG,
            "--config.train.log_every=3",
            f"--workdir={workdir}",
            f"--config.data.root={tmp_path}/shapes",
        ],
    )
    with processes.started(commands, logs) as (zero, one):
        _wait_for(logs / "0.log", r"step 3/", zero)
        os.kill(one.pid, signal.SIGTERM)  # process 1 only
        results = processes.finish([zero, one], logs)
    steps = {_preempted_step(c, o, signal.SIGTERM) for c, o in results}
    assert len(steps) == 1, results
    (step,) = steps
    assert step % 3 == 0, step  # an agreed (log) step
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == [
        str(step)
    ]
    assert (
        workdir / "checkpoints" / str(step) / "_CHECKPOINT_METADATA"
    ).exists()


def _limit_file_size(limit: int):
    """A preexec_fn: writes past `limit` bytes per file fail (EFBIG), as
    on a full disk."""

    def apply():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _save_failed(
    code: int, output: str, workdir: pathlib.Path, step: int, reason: str
) -> None:
    """Asserts exit 1 and the one line of a failed save of `step` into a
    workdir without an earlier checkpoint."""
    assert code == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [x for x in output.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, output[-3000:]
    assert re.fullmatch(
        rf"error: the checkpoint of step {step} could not be written to "
        rf"{workdir}/checkpoints: {reason}; \d+ MiB free there; no "
        r"earlier checkpoint",
        errors[0],
    ), errors


@pytest.mark.slow
def test_a_failed_checkpoint_write_is_one_line_at_the_next_step(tmp_path):
    workdir = tmp_path / "run"
    command, env = _train(
        tmp_path,
        workdir,
        "--config.train.checkpoint_every=2",
        "--config.train.num_steps=40",
    )
    # The shapes data (small files) first, without the limit.
    first = processes.run(
        [_train(tmp_path, tmp_path / "warm", "--config.train.num_steps=1")],
        tmp_path / "l1",
    )
    assert first[0][0] == 0, first[0][1][-3000:]
    result = _run_once(command, env, preexec_fn=_limit_file_size(1_000_000))
    _save_failed(
        result.returncode,
        result.stdout + result.stderr,
        workdir,
        2,
        "File too large",
    )
    # Noticed within a step or two, not at the end of the run.
    logged = [x["step"] for x in processes.train_lines(workdir)]
    assert 2 <= max(logged) <= 4, logged
    assert not any((workdir / "checkpoints").glob("*"))  # no partial save


@pytest.mark.slow
def test_a_save_into_a_checkpoints_file_ends_the_process_in_one_line(
    tmp_path,
):
    """checkpoints/ replaced by a file mid-run: the save of step 20 fails
    in one line and the process ends within seconds, though orbax's
    threads of that save wait minutes for the folder."""
    workdir = tmp_path / "run"
    command, env = _train(
        tmp_path, workdir, "--config.train.checkpoint_every=20"
    )
    logs = tmp_path / "logs"
    with processes.started([(command, env)], logs) as (process,):
        _wait_for(logs / "0.log", r"step 2/", process)
        shutil.rmtree(workdir / "checkpoints", ignore_errors=True)
        (workdir / "checkpoints").write_text("")
        _wait_for(logs / "0.log", r"(?m)^error: ", process)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("still running 30 s after its error line")
    output = (logs / "0.log").read_text()
    _save_failed(process.returncode, output, workdir, 20, "Not a directory")


def test_a_checkpoints_file_is_refused_before_metrics_are_touched(tmp_path):
    """A run never erases what it cannot continue: with checkpoints/ a
    file, the old run's metrics.jsonl lines stay and nothing is trained."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "checkpoints").write_text("")
    metrics = "".join(f'{{"step": {i}}}\n' for i in range(1, 5))
    (workdir / "metrics.jsonl").write_text(metrics)
    command, env = _train(tmp_path, workdir)
    result = _run_once(command, env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    errors = [x for x in output.splitlines() if x.startswith("error: ")]
    assert errors == [
        f"error: --workdir={workdir}: {workdir}/checkpoints is a file, not "
        "the checkpoints folder a training run keeps there; move it away or "
        "choose another --workdir"
    ], output[-3000:]
    assert (workdir / "metrics.jsonl").read_text() == metrics
    assert sorted(p.name for p in workdir.iterdir()) == [
        "checkpoints",
        "metrics.jsonl",
    ]
