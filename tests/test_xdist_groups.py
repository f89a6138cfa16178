"""The tests of one group in tests/helpers/groups.py share one xdist worker,
so each shared fixture and compiled program is built once."""

import subprocess
import sys

import pytest

pytest.importorskip("xdist")

_PROBE = """
import os

import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("index", range(6))
def test_worker(index):
    print("WORKER", os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_probe.py").write_text(_PROBE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist=loadgroup",
            "-p",
            "no:cacheprovider",
            "-rA",
            "-q",
            str(tmp_path / "test_probe.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    workers = {
        line.split()[-1]
        for line in done.stdout.splitlines()
        if line.startswith("WORKER ")
    }
    assert len(workers) == 1, done.stdout[-3000:]
