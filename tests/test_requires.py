"""tests/helpers/requires.py: where TensorFlow, pycocotools or clu are
missing (GPU images), the tests that need them skip, and nothing fails."""

import pathlib
import re
import subprocess
import sys

import pytest

from tests.helpers import requires

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCKED = ",".join(requires.TRAIN_LOOP)
# The tests that need the blocked modules -> how many skips each reports.
GUARDED = {
    "tests/detector/state/test_warm_start.py": 1,  # the whole module
    "tests/detector/engine/test_train_lib.py": 1,
    "tests/test_entry_points.py": 1,
    "tests/test_multihost.py::"
    "test_batch_not_divisible_by_the_processes_is_one_line": 1,
    "tests/test_import_graph.py::test_shapes_writer_imports_no_tensorflow": 1,
    "tests/test_import_graph.py::"
    "test_importing_the_pipeline_registers_no_exit_hook": 1,
    "tests/detector/imaging/test_detections.py": 1,
}


def test_block_makes_a_module_look_not_installed(monkeypatch):
    name = "colorsys"  # stdlib, not imported by the suite
    monkeypatch.delitem(sys.modules, name, raising=False)
    assert requires.missing(name) == []
    requires.block((name,))
    try:
        assert requires.missing(name, "json") == [name]
        with pytest.raises(ModuleNotFoundError):
            __import__(name)
    finally:
        # Not monkeypatch: its undo would put the block back at teardown.
        sys.modules.pop(name, None)


def test_block_refuses_a_module_already_imported():
    with pytest.raises(RuntimeError, match="json is already imported"):
        requires.block(("json",))


def test_guarded_tests_skip_when_the_data_libraries_are_missing():
    """The guarded tests in a session with TF, pycocotools and clu blocked:
    every one skips with a reason naming what is missing, none fails."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            *GUARDED,
        ],
        cwd=ROOT,
        env={**_env(), requires.BLOCK_ENV: BLOCKED},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    skips = re.findall(r"^SKIPPED \[(\d+)\] (\S+): (.*)$", output, re.M)
    assert sum(int(count) for count, _, _ in skips) == sum(GUARDED.values())
    for _, _, reason in skips:
        assert re.search(r"tensorflow|pycocotools|clu", reason), reason
    assert re.search(r"\b(failed|error)", output.splitlines()[-1]) is None


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != requires.BLOCK_ENV}


def test_torch_beside_tensorflow_is_found(monkeypatch):
    """The check tests/conftest.py runs after every test."""
    from tests.helpers import torch_process

    with monkeypatch.context() as patch:  # undone before conftest checks
        patch.setitem(sys.modules, "torch", object())
        patch.setitem(sys.modules, "tensorflow", None)  # blocked
        assert not torch_process.shares_process_with_tensorflow()
        patch.setitem(sys.modules, "tensorflow", object())
        assert torch_process.shares_process_with_tensorflow()
