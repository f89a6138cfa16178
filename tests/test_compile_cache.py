"""train.py with its persistent compilation cache: a second run loads the
programs the first compiled, and a damaged cache entry is compiled again
with one line, never a crash (detector/utils/compile_cache.py)."""

import pathlib
import subprocess
import sys

import pytest

from detector.utils import compile_cache
from tests.helpers import processes, requires

requires.module_or_skip(*requires.TRAIN_LOOP)

LOADED = "loaded from the compilation cache"
COMPILING = "Compiling the train step and predict"
LOADING = "Loading the train step and predict from the compilation cache"
KEPT = "kept in the compilation cache"
UNUSABLE = "Compilation cache: an entry could not be used"


def _train(tmp_path: pathlib.Path, cache: pathlib.Path, name: str) -> str:
    """train.py's smoke run into a new workdir; its console."""
    env = {**processes.env(), compile_cache.ENV: str(cache)}
    result = subprocess.run(
        [
            sys.executable,
            str(processes.ROOT / "train.py"),
            *processes.SMOKE,
            f"--config.data.root={tmp_path / 'data'}",
            "--config.train.num_steps=2",
            f"--workdir={tmp_path / name}",
        ],
        cwd=processes.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=processes.TIMEOUT_S * 2,
        check=False,
    )
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-3000:]
    return console


def _first_line(console: str) -> str:
    """train.py's first log line (the console is its stdout, then its
    stderr)."""
    return next(x for x in console.splitlines() if "Starting JAX" in x)


@pytest.mark.slow  # three smoke runs of train.py
def test_a_rerun_loads_its_programs_and_a_damaged_entry_is_one_line(
    tmp_path,
):
    cache = tmp_path / "cache"
    first = _train(tmp_path, cache, "first")
    assert KEPT in first and LOADED not in first, first[-3000:]
    assert COMPILING in first and LOADING not in first
    assert "compilation cache" not in _first_line(first)  # empty
    entries = [p for p in cache.iterdir() if p.is_file()]
    assert entries
    second = _train(tmp_path, cache, "second")
    assert LOADED in second, second[-3000:]
    # Said before the compile, from the run's first line on.
    assert (
        f"programs compiled before are kept in the compilation cache "
        f"({cache})" in _first_line(second)
    ), second[-3000:]
    assert COMPILING not in second
    assert second.index(LOADING) < second.index(LOADED)
    for entry in entries:  # cut short, as by a concurrent writer or a crash
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    third = _train(tmp_path, cache, "third")
    assert third.count(UNUSABLE) == 1, third[-3000:]
    assert COMPILING in third and LOADING not in third  # cut: not promised
    assert "Traceback" not in third and LOADED not in third
