"""train.py's loop against its bare compiled step, on one config.

    python benchmarks/loop_bench.py --config=configs/shapes.py:runlocal
    python benchmarks/loop_bench.py --config=configs/shapes.py:runlocal \
        --loop_steps=110 --log_every=10 --checkpoint_every=50

Times, in one process on the same config and input pipeline: the bare
train step as `step_bench.py` times it (its `--steps` and `--warmup`,
device-synchronised, on `--num_batches` cycled pipeline batches), before
and after `train_lib.train_and_evaluate` runs `--loop_steps` steps (the
real input pipeline, metrics logging every `--log_every` steps and
checkpoints every `--checkpoint_every`; no evaluation) in a temporary
workdir. The loop's wall time per step runs from its first metrics line to
its last (the first window, with the compile and warm-up, left out).
Prints both and the loop's over the mean of the bare step's two medians
(a loaded machine's drift moves both), and writes loop_bench.json under
--out. The step_bench.py flags (--config, --steps, --warmup,
--num_batches, --out) apply.
"""

import json
import pathlib
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks import nms_bench, step_bench  # noqa: E402
from detector.distributed import determinism, sharding  # noqa: E402
from detector.engine import train_lib, train_metrics  # noqa: E402
from detector.launch import cli, validate  # noqa: E402
from detector.utils import compile_cache  # noqa: E402
from tests.helpers import launch_hooks  # noqa: E402 - train.py's hooks

_LOOP_STEPS = flags.DEFINE_integer(
    "loop_steps", 110, "Steps train.py's loop runs.", lower_bound=2
)
_LOG_EVERY = flags.DEFINE_integer(
    "log_every", 10, "The loop's train.log_every.", lower_bound=1
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every", 50, "The loop's train.checkpoint_every.", lower_bound=1
)


def loop_seconds_per_step(config, workdir: pathlib.Path) -> dict:
    """Runs the training loop; its wall seconds per step between its first
    and last metrics lines."""
    stamps = {}
    write = train_metrics.MetricsLog.write

    def stamped(self, step, metrics):
        line = write(self, step, metrics)
        stamps[step] = time.perf_counter()
        return line

    train_metrics.MetricsLog.write = stamped
    try:
        train_lib.train_and_evaluate(
            config,
            workdir,
            hooks=launch_hooks.TRAIN_PY,
            evaluate=False,
        )
    finally:
        train_metrics.MetricsLog.write = write
    first, last = min(stamps), max(stamps)
    return {
        "steps_timed": last - first,
        "ms_per_step": 1e3 * (stamps[last] - stamps[first]) / (last - first),
    }


def main(argv) -> None:
    del argv
    config = cli.config_value(step_bench._CONFIG)
    train = config.train
    train.num_steps = _LOOP_STEPS.value
    train.log_every = _LOG_EVERY.value
    train.checkpoint_every = _CHECKPOINT_EVERY.value
    train.eval_every = 0
    with cli.one_line_errors():
        validate.validate(config)
    determinism.apply(config.train.deterministic)  # before any backend
    compile_cache.enable()
    mesh = sharding.make_mesh()
    batches = [
        sharding.put_batch(b, mesh)
        for b in step_bench.pipeline_batches(
            config, step_bench._NUM_BATCHES.value
        )
    ]
    backend = config.model.rpn.nms_backend
    # The bare step before and after the loop: a machine whose load drifts
    # moves both; the ratio takes their mean.
    before = step_bench.time_backend(config, backend, batches, mesh)
    with tempfile.TemporaryDirectory() as workdir:
        loop = loop_seconds_per_step(config, pathlib.Path(workdir))
    after = step_bench.time_backend(config, backend, batches, mesh)
    bare = {
        "median_ms": (before["median_ms"] + after["median_ms"]) / 2,
        "median_ms_before_loop": before["median_ms"],
        "median_ms_after_loop": after["median_ms"],
    }
    ratio = loop["ms_per_step"] / bare["median_ms"]
    result = {
        "machine": nms_bench.machine(),
        "config": step_bench.relative_config_path(
            config_flags.get_config_filename(flags.FLAGS["config"])
        ),
        "batch_size": train.batch_size,
        "nms_backend": backend,
        "bare_step": {**bare, "steps": step_bench._STEPS.value},
        "loop": {
            **loop,
            "num_steps": train.num_steps,
            "log_every": train.log_every,
            "checkpoint_every": train.checkpoint_every,
        },
        "loop_over_bare": ratio,
    }
    out = pathlib.Path(step_bench._OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loop_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"bare step {bare['median_ms']:.1f} ms (mean of the medians of "
        f"{step_bench._STEPS.value} steps before and after the loop: "
        f"{before['median_ms']:.1f}, {after['median_ms']:.1f}); "
        f"loop {loop['ms_per_step']:.1f} ms/step "
        f"(wall, steps {train.log_every}-{train.num_steps}); loop / bare "
        f"{ratio:.3f}"
    )


if __name__ == "__main__":
    app.run(main)
