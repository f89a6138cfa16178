"""Time from SIGTERM to exit of a training run (what a preemption costs).

    python benchmarks/preemption_bench.py [--reps 3] [--after_step 3]

For each config, starts `train.py` as a real process (long schedule, one log
line per step, no periodic checkpoint), waits until step `--after_step` is
logged, sends SIGTERM and times until the process has exited: the rest of
the current step, the checkpoint of it (checksums, orbax write, wait), the
writers' close and the interpreter's exit. Each rep is a fresh run on a new
workdir (one compilation cache shared by the reps). Prints one JSON object
per config with the median, min and max seconds, the median time until the
`preempted at step N` line (the checkpoint is on disk then; the rest is the
interpreter's exit) and the checkpoint size, and writes them all to --out.
"""

import argparse
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]

# name -> train.py arguments (besides workdir and the long schedule).
CONFIGS = {
    "shapes:runlocal": ["--config=configs/shapes.py:runlocal"],
    # The R50-FPN config's smoke variant on the shapes data (its own
    # :runlocal reads COCO): ResNet-18 backbone, 256 x 256, batch 2.
    "coco_r50_fpn:runlocal,shapes": [
        "--config=configs/coco_r50_fpn.py:runlocal,shapes",
        "--config.train.batch_size=2",
        "--config.eval.batch_size=2",
    ],
}
LONG = [
    "--config.train.num_steps=100000",
    "--config.train.log_every=1",
    "--config.train.checkpoint_every=100000",
]


def _one(args, root: pathlib.Path, after_step: int, env) -> dict:
    workdir = pathlib.Path(tempfile.mkdtemp(dir=root))
    log = workdir.with_suffix(".log")
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "train.py", *args, *LONG, f"--workdir={workdir}"],
            cwd=_REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pattern = re.compile(rf"step {after_step}/")
    while not pattern.search(log.read_text(errors="replace")):
        if process.poll() is not None:
            raise RuntimeError(f"ended early:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    sent = time.perf_counter()
    os.kill(process.pid, signal.SIGTERM)
    saved = None  # until the `preempted at step` line is out
    while process.poll() is None:
        if saved is None and "preempted at step" in log.read_text():
            saved = time.perf_counter() - sent
        time.sleep(0.01)
    seconds = time.perf_counter() - sent
    code = process.returncode
    text = log.read_text()
    found = re.findall(r"preempted at step (\d+): checkpoint saved", text)
    if code != 143 or len(found) != 1:
        raise RuntimeError(f"exit {code}:\n{text[-3000:]}")
    step_dir = workdir / "checkpoints" / found[0]
    size = sum(f.stat().st_size for f in step_dir.rglob("*") if f.is_file())
    return {
        "seconds": seconds,
        "saved_seconds": seconds if saved is None else saved,
        "step": int(found[0]),
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--after_step", type=int, default=3)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument(
        "--out", default=str(_REPO / "benchmarks/results/preemption.json")
    )
    flags = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as root:
        root = pathlib.Path(root)
        env = {
            **os.environ,
            "JAX_COMPILATION_CACHE_DIR": str(root / "jax_cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
        }
        for name in flags.configs:
            args = [*CONFIGS[name], f"--config.data.root={root}/shapes"]
            _one(args, root, flags.after_step, env)  # warm-up: cache, data
            runs = [
                _one(args, root, flags.after_step, env)
                for _ in range(flags.reps)
            ]
            seconds = [r["seconds"] for r in runs]
            result = {
                "config": name,
                "sigterm_to_exit_s_median": statistics.median(seconds),
                "sigterm_to_saved_line_s_median": statistics.median(
                    r["saved_seconds"] for r in runs
                ),
                "min_s": min(seconds),
                "max_s": max(seconds),
                "reps": flags.reps,
                "checkpoint_mib": runs[0]["bytes"] / 2**20,
                "machine": f"{os.cpu_count()}-core {platform.machine()}, "
                f"JAX {importlib.metadata.version('jax')} "
                f"({os.environ.get('JAX_PLATFORMS') or 'default backend'})",
            }
            print(json.dumps(result), flush=True)
            results.append(result)
    pathlib.Path(flags.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
