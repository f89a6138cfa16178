"""torch and torchvision code run in a child process.

    @torch_process.needs_torch      # runs torch in a child process itself
    def test_x(tmp_path): torch_process.write_fixture(out, ...)

    @torch_process.imports_torch    # imports torch: the whole test runs in
    def test_y(): import torch ...  # a child pytest without TensorFlow

torch imported into a process that has imported TensorFlow crashes (triton's
import segfaults), and the test process imports TensorFlow (the data
pipeline), so anything that runs torch runs in a child process with the
parent's environment (PYTHONPATH included). Both decorators mark the test
`torch` (the torch stage of .ci/run selects them: `pytest -m torch`) and
skip it where torch or torchvision is missing; tests/conftest.py runs an
`imports_torch` test as a child pytest with TensorFlow blocked, and fails
any test after which torch and TensorFlow share the process.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_SCRIPT = ROOT / "tests/detector/weights/make_torchvision_fixture.py"
# Set in the child pytest of an `imports_torch` test.
CHILD_ENV = "DETECTOR_TORCH_CHILD"
IN_CHILD_MARK = "torch_in_child"


def available() -> bool:
    """Whether torch and torchvision can be imported (without importing)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("torch", "torchvision")
    )


_SKIP = pytest.mark.skipif(
    not available(),
    reason="needs torch and torchvision (the torch stage: pytest -m torch)",
)


def needs_torch(test):
    """Marks a test that runs torch in child processes: `torch`, skipped
    without torch and torchvision."""
    return pytest.mark.torch(_SKIP(test))


def imports_torch(test):
    """Marks a test that imports torch itself: as `needs_torch`, and run
    whole in a child pytest without TensorFlow (tests/conftest.py)."""
    return getattr(pytest.mark, IN_CHILD_MARK)(needs_torch(test))


def in_child() -> bool:
    """Whether this process is the child pytest of an `imports_torch` test."""
    return os.environ.get(CHILD_ENV) == "1"


def shares_process_with_tensorflow() -> bool:
    """Whether torch and TensorFlow are both imported in this process."""
    return all(
        sys.modules.get(name) is not None for name in ("torch", "tensorflow")
    )


def run_test(nodeid: str, timeout: float = 900) -> None:
    """Runs one test (its pytest node id) in a child pytest with TensorFlow
    blocked; raises with its output when it fails, skips when it skips."""
    env = dict(os.environ)
    blocked = [n for n in env.get("DETECTOR_TEST_BLOCK", "").split(",") if n]
    env["DETECTOR_TEST_BLOCK"] = ",".join([*blocked, "tensorflow"])
    env[CHILD_ENV] = "1"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-n",
            "0",
            "-m",
            "",
            "-p",
            "no:cacheprovider",
            nodeid,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    out = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"{nodeid} in a child pytest:\n{out[-6000:]}")
    if re.search(r"\b1 passed\b", out) is None:
        pytest.skip(f"in a child pytest: {out.strip().splitlines()[-1]}")


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
