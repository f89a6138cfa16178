"""Time for a second train.py to refuse a workdir another run holds.

    python benchmarks/busy_workdir_bench.py [--reps 5]

Holds `<workdir>/.train.lock` as a running train.py does (the workdir
lock, taken in this process), then starts `train.py` on that workdir
`--reps` times and times each from start to exit; every run must end with
the `another training run is using it` line. Prints one JSON object with
the median, min and max seconds and the machine's load average.
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from detector.utils import workdir_lock  # noqa: E402

BUSY = "another training run is using it"


def _refusal_seconds(workdir: pathlib.Path) -> float:
    """Seconds from start to exit of train.py on the held `workdir`."""
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "train.py",
            "--config=configs/shapes.py:runlocal",
            f"--workdir={workdir}",
        ],
        cwd=_REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.perf_counter() - started
    if BUSY not in done.stderr:
        raise SystemExit(f"train.py did not refuse: {done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        workdir = pathlib.Path(root)
        lock = workdir_lock.WorkdirLock.acquire(workdir)
        try:
            times = [_refusal_seconds(workdir) for _ in range(args.reps)]
        finally:
            lock.release()
    print(
        json.dumps(
            {
                "median_s": round(statistics.median(times), 2),
                "min_s": round(min(times), 2),
                "max_s": round(max(times), 2),
                "reps": args.reps,
                "load_average": os.getloadavg(),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            }
        )
    )


if __name__ == "__main__":
    main()
