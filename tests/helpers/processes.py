"""Runs entry points as real processes for tests, alone or as a job.

Every process runs in its own process group, killed when the block that
started it ends however it ends.
"""

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import pytest

from tests.helpers import cpu_compiles

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The smoke config with the fastest-compiling NMS and a schedule that does
# not depend on num_steps, so a resumed leg reuses the compiled programs.
SMOKE = [
    "--config=configs/shapes.py:runlocal",
    "--nms=while_loop",
    "--config.train.schedule=step",
    "--config.train.checkpoint_every=2",
    "--config.model.detection.score_threshold=0.0",
]
TIMEOUT_S = 300
# The data fields of mixed_orientations.grouped_config that SMOKE takes
# to train on two orientation canvases.
GROUPED_FIELDS = (
    "source",
    "resize",
    "min_size",
    "max_size",
    "image_size",
    "group_orientations",
)


def grouped(root: pathlib.Path, train: int = 12, val: int = 4) -> list[str]:
    """Overrides of SMOKE for orientation canvases: a folder of landscape
    and portrait images (train, val) written at `root`, read on a 64 x 128
    and a 128 x 64 canvas."""
    # Here, not at import: the folder is written with pycocotools, which
    # the tests that only start processes may lack.
    from tests.helpers import mixed_orientations  # noqa: PLC0415

    mixed_orientations.write(root, "train", train)
    mixed_orientations.write(root, "val", val)
    data = mixed_orientations.grouped_config(root).data
    return [
        f"--config.data.root={root}",
        *(f"--config.data.{key}={data[key]}" for key in GROUPED_FIELDS),
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def env(*, devices: int = 1) -> dict[str, str]:
    """CPU only, `devices` of them.

    The programs are compiled without backend optimisation (every run of
    every test alike), through the session's compilation cache, which
    os.environ names (tests/helpers/compilation_cache.py): the runs are a
    few steps long, and the processes of a leg compile at the same time on
    the same cores.

    Args:
      devices: the number of CPU devices.
    """
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": (
            f"--xla_force_host_platform_device_count={devices} "
            f"{cpu_compiles.FLAG}"
        ),
    }


@contextlib.contextmanager
def started(
    commands: Sequence[tuple[list[str], dict[str, str]]],
    logs: pathlib.Path,
    cwd: pathlib.Path = ROOT,
) -> Iterator[list[subprocess.Popen]]:
    """Starts (argv, env) commands in `cwd`; kills their process groups at
    exit."""
    logs.mkdir(parents=True, exist_ok=True)
    processes = []
    try:
        for index, (argv, env) in enumerate(commands):
            with open(logs / f"{index}.log", "w") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, *argv],
                        cwd=cwd,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def finish(
    processes: list[subprocess.Popen], logs: pathlib.Path
) -> list[tuple[int, str]]:
    """(exit code, output) of each process; fails past TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running after {TIMEOUT_S} s:\n"
                + (logs / "0.log").read_text()[-3000:]
            )
    return [
        (p.returncode, (logs / f"{i}.log").read_text())
        for i, p in enumerate(processes)
    ]


def two_processes(
    script: str,
    args: Sequence[str],
    extra: Sequence[str] = (),
) -> list[tuple[list[str], dict[str, str]]]:
    """Commands for processes 0 and 1 of a job on localhost.

    `extra` entries (one per process, '' for none) are added to process
    i's arguments.
    """
    address = f"localhost:{free_port()}"
    extra = list(extra) or ["", ""]
    return [
        (
            [
                script,
                *args,
                f"--coordinator_address={address}",
                "--num_processes=2",
                f"--process_id={index}",
                *filter(None, [extra[index]]),
            ],
            env(),
        )
        for index in range(2)
    ]


def run(
    commands, logs: pathlib.Path, cwd: pathlib.Path = ROOT
) -> list[tuple[int, str]]:
    with started(commands, logs, cwd) as processes:
        return finish(processes, logs)


def train_lines(workdir: pathlib.Path) -> list[dict]:
    """The training lines of a workdir's metrics.jsonl (no eval lines)."""
    return [
        line
        for line in map(
            json.loads, (workdir / "metrics.jsonl").read_text().splitlines()
        )
        if not line.get("eval")
    ]
