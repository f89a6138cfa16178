"""torch and torchvision code run in a child process.

    if torch_process.available(): torch_process.write_fixture(out, ...)

torchvision imported into a process that has imported TensorFlow crashes on
some machines, and the test process imports TensorFlow (the data pipeline),
so anything that runs torchvision runs as a child Python process with the
parent's environment (PYTHONPATH included).
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_SCRIPT = ROOT / "tests/detector/weights/make_torchvision_fixture.py"


def available() -> bool:
    """Whether torch and torchvision can be imported (without importing)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("torch", "torchvision")
    )


def run(args: list[str], timeout: float = 600) -> str:
    """Runs `python ARGS` in a child process; its stdout, or raises."""
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {result.returncode}: "
            f"{result.stderr[-3000:]}"
        )
    return result.stdout


def write_fixture(
    out: pathlib.Path,
    *,
    width: str,
    size: int,
    seed: int = 0,
    threads=2,
    version: str = "v1",
) -> None:
    """make_torchvision_fixture.py: OUT.safetensors and OUT.npz."""
    run(
        [
            str(FIXTURE_SCRIPT),
            f"--out={out}",
            f"--version={version}",
            f"--width={width}",
            f"--size={size}",
            f"--seed={seed}",
            f"--threads={threads}",
        ]
    )
