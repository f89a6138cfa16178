"""Training step time per NMS backend, and the share of it that NMS takes.

    python benchmarks/step_bench.py [--config=configs/shapes.py] [--steps 30]
    python benchmarks/step_bench.py --config=configs/coco_r50_fpn.py:shapes \
        --save_batches=batches.npz        # needs TensorFlow: writes, exits
    python benchmarks/step_bench.py --config=configs/coco_r50_fpn.py:shapes \
        --batches=batches.npz             # no TensorFlow needed

For one config it trains `--steps` timed steps (after `--warmup` steps) with
each NMS backend of `--backends` in turn (any of ops.nms.BACKENDS and
'topk'; `--backends=pallas_triton,pallas_mosaic_gpu` compares the two CUDA
kernels of pallas on one GPU), in one process, on the same cycled batches
and the same initial params, and reports per backend: median and p90 step time
(device-synchronised), images/s, host round-trips per step (audited from the
compiled step), and the NMS share: the step time minus the step time with
both NMS calls replaced by a plain top-k of the same shapes ('topk'), so the
cost of NMS is measured, not guessed. Prints a table and writes
step_bench.json (per backend its timings and `nms_share`; the config path
relative to the repository root) and step_bench.png under --out.

The batches come from the config's input pipeline (tf.data), or from a
file: `--save_batches FILE.npz` writes `--num_batches` batches of the real
pipeline and exits; `--batches FILE.npz` times on them with no TensorFlow
import (benchmarks/batch_file.py), e.g. on a GPU machine without it.
`config.train.deterministic` is applied before JAX starts a backend and
recorded in the JSON.

`--parts` instead breaks the step of one backend (`--parts_backend`) into
stages, each its own compiled program, with model FLOPs and utilisation
(benchmarks/step_parts.py), and writes step_parts.json. `--trace DIR`
writes a jax.profiler trace of a few train steps (TensorBoard or Perfetto).
`--flops_only` prints the model GFLOP of each stage, the step and predict,
counted from shapes alone (nothing is initialised or run), per canvas of
the config (two with `data.group_orientations`). Batches on two canvases
compile one step program each.
"""

import copy
import json
import pathlib
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks import batch_file, nms_bench, step_parts  # noqa: E402
from detector.distributed import determinism, sharding  # noqa: E402
from detector.engine import train_programs  # noqa: E402
from detector.engine import train_step as step_lib  # noqa: E402
from detector.imaging import canvases  # noqa: E402
from detector.inference import programs as programs_lib  # noqa: E402
from detector.launch import cli, validate  # noqa: E402
from detector.state import optimizer  # noqa: E402
from detector.state import train_state as state_lib  # noqa: E402
from ops import host_audit  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", str(_REPO / "configs" / "shapes.py"), "Config to time."
)
_STEPS = flags.DEFINE_integer("steps", 30, "Timed steps per backend.")
_WARMUP = flags.DEFINE_integer("warmup", 5, "Untimed steps per backend.")
_NUM_BATCHES = flags.DEFINE_integer(
    "num_batches", 8, "Distinct batches to cycle (or save)."
)
_SAVE_BATCHES = flags.DEFINE_string(
    "save_batches",
    None,
    "Write --num_batches batches of the config's "
    "pipeline to this .npz file and exit.",
)
_LOAD_BATCHES = flags.DEFINE_string(
    "batches",
    None,
    "Time on the batches saved in this .npz file (no "
    "TensorFlow needed) instead of running the pipeline.",
)
_BACKENDS = flags.DEFINE_list(
    "backends",
    "cpu,while_loop,pallas,topk",
    "Backends to time ('topk' is the baseline; pallas_mosaic_gpu and "
    "pallas_triton name pallas's CUDA kernel).",
)
_OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")
_PARTS = flags.DEFINE_bool("parts", False, "Time the step stage by stage.")
_PARTS_BACKEND = flags.DEFINE_string(
    "parts_backend", "pallas", "NMS backend of the --parts breakdown."
)
_FLOPS_ONLY = flags.DEFINE_bool(
    "flops_only",
    False,
    "Print the model GFLOP of each stage (from shapes, nothing runs) and exit.",
)
_TRACE = flags.DEFINE_string(
    "trace", None, "Write a jax.profiler trace of 3 steps here."
)


def time_backend(config, backend: str, batches, mesh) -> dict:
    """Compiles and times the train step with one NMS backend."""
    config = copy.deepcopy(config)
    cli.set_nms_backend(config, backend, allow_baselines=True)
    tx, schedule = optimizer.make_optimizer(config)
    graphdef, params, rest = state_lib.create_model(config, config.seed)
    state = sharding.replicate(state_lib.init_state(params, rest, tx), mesh)
    key = sharding.replicate(jax.random.key(config.seed), mesh)
    step_fn = step_lib.make_train_step(graphdef, tx, schedule, mesh)
    # One program per canvas the batches hold.
    programs, findings = train_programs.compile_per_canvas(
        step_fn,
        state,
        batches[0],
        key,
        tuple(
            dict.fromkeys(programs_lib.canvas_of(b["image"]) for b in batches)
        ),
        strict=False,
        advice=None,
        name=f"train_step[{backend}]",
    )
    times = []
    with host_audit.device_only_transfers():
        for i in range(_WARMUP.value + _STEPS.value):
            batch = batches[i % len(batches)]
            started = time.perf_counter()
            state, metrics = programs(state, batch, key)
            jax.block_until_ready(metrics)
            if i >= _WARMUP.value:
                times.append((time.perf_counter() - started) * 1e3)
    median, p90 = np.median(times), np.percentile(times, 90)
    return {
        "median_ms": float(median),
        "p90_ms": float(p90),
        "images_per_sec": config.train.batch_size / (median / 1e3),
        "programs": len(programs.programs),
        "host_roundtrips_per_step": len(findings),
        "host_roundtrip_ops": [str(f) for f in findings],
        "final_total_loss": float(jax.device_get(metrics["total"])),
    }


def nms_share(results: dict, backend: str) -> dict | None:
    """{ms, percent}: the backend's median step minus the 'topk' baseline's.

    None for the baseline itself, or when the baseline was not timed.
    """
    base = results.get("topk", {}).get("median_ms")
    if backend == "topk" or base is None:
        return None
    median = results[backend]["median_ms"]
    return {"ms": median - base, "percent": 100.0 * (median - base) / median}


def relative_config_path(path: str) -> str:
    """`path` relative to the repository root when inside it, else as given."""
    resolved = pathlib.Path(path).resolve()
    if resolved.is_relative_to(_REPO):
        return resolved.relative_to(_REPO).as_posix()
    return path


def table(results: dict) -> str:
    lines = [
        "| backend | step median ms | p90 ms | images/s | NMS share "
        "| host round-trips/step |",
        "|---|---|---|---|---|---|",
    ]
    for backend, r in results.items():
        share = r.get("nms_share")
        share = (
            "baseline"
            if share is None
            else f"{share['ms']:.1f} ms ({share['percent']:.0f}%)"
        )
        lines.append(
            f"| {backend} | {r['median_ms']:.1f} | "
            f"{r['p90_ms']:.1f} | {r['images_per_sec']:.1f} | "
            f"{share} | {r['host_roundtrips_per_step']} |"
        )
    return "\n".join(lines)


def plot(results: dict, path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    base = results.get("topk", {}).get("median_ms", 0.0)
    medians = np.array([results[n]["median_ms"] for n in names])
    rest = np.minimum(medians, base) if base else medians
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(names, rest, label="step without NMS (topk baseline)")
    ax.bar(names, medians - rest, bottom=rest, label="NMS")
    ax.set_ylabel("median step time (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_parts(config, batch, mesh) -> None:
    """--parts: the stage breakdown table and step_parts.json."""
    results = step_parts.run_parts(
        config,
        batch,
        mesh,
        reps=_STEPS.value,
        warmup=_WARMUP.value,
        backend=_PARTS_BACKEND.value,
        trace_dir=_TRACE.value,
    )
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    info = nms_bench.machine()
    (out / "step_parts.json").write_text(
        json.dumps(
            {
                "machine": info,
                "config": relative_config_path(
                    config_flags.get_config_filename(flags.FLAGS["config"])
                ),
                **results,
            },
            indent=2,
        )
    )
    print(
        f"\nTrain step by stage, {info['device_kind']} "
        f"({info['cpu_count']} cores), batch {config.train.batch_size}, "
        f"median of {_STEPS.value}\n"
    )
    print(step_parts.table(results))


def pipeline_batches(config, count: int) -> list[dict]:
    """`count` batches of the config's input pipeline (imports TensorFlow)."""
    from detector.data import pipeline

    pipeline.prepare(config)
    source = pipeline.train_batches(config)
    return [next(source) for _ in range(count)]


def file_batches(config, path: str) -> list[dict]:
    """The batches saved in `path`, checked against the config's shapes."""
    batches = batch_file.load(path)
    batch_file.check_shapes(batches, config, path)
    return batches


def save(config, path: str) -> None:
    path = batch_file.save(
        path, pipeline_batches(config, _NUM_BATCHES.value), config.data
    )
    print(
        f"wrote {_NUM_BATCHES.value} batches of {config.train.batch_size} "
        f"to {path} ({path.stat().st_size / 2**20:.1f} MiB)"
    )


def main(argv) -> None:
    del argv
    config = cli.config_value(_CONFIG)
    with cli.one_line_errors():
        validate.validate(config)
    determinism.apply(config.train.deterministic)  # before any backend
    if _FLOPS_ONLY.value:
        for canvas in canvases.canvases(config.data):
            print(f"canvas {canvas[0]} x {canvas[1]}:")
            for name, gflop in step_parts.count_parts(
                config, sharding.make_mesh(), canvas
            ).items():
                print(f"  {name}: {gflop:.1f} GFLOP")
        return
    with cli.one_line_errors():
        if _SAVE_BATCHES.value:
            return save(config, _SAVE_BATCHES.value)
        batches = (
            file_batches(config, _LOAD_BATCHES.value)
            if _LOAD_BATCHES.value
            else pipeline_batches(config, _NUM_BATCHES.value)
        )
    mesh = sharding.make_mesh()
    batches = [sharding.put_batch(b, mesh) for b in batches]
    if _PARTS.value:  # traces the step it times
        return run_parts(config, batches[0], mesh)
    if _TRACE.value:
        step_parts.trace_steps(config, batches[0], mesh, _TRACE.value)
    results = {}
    for backend in _BACKENDS.value:
        results[backend] = time_backend(config, backend, batches, mesh)
        logging.info("%s: %s", backend, results[backend])
    for backend, result in results.items():
        result["nms_share"] = nms_share(results, backend)
    report(config, results)


def report(config, results: dict) -> None:
    """Writes step_bench.json and .png under --out and prints the table."""
    info = nms_bench.machine()
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_bench.json").write_text(
        json.dumps(
            {
                "machine": info,
                "config": relative_config_path(
                    config_flags.get_config_filename(flags.FLAGS["config"])
                ),
                "batch_size": config.train.batch_size,
                "batches": _LOAD_BATCHES.value or "pipeline",
                "deterministic": determinism.enabled(),
                "steps": _STEPS.value,
                "results": results,
            },
            indent=2,
        )
    )
    title = (
        f"Train step per NMS backend, {info['platform']} "
        f"({info['device_kind']}, {info['cpu_count']} cores), "
        f"batch {config.train.batch_size}"
    )
    plot(results, out / "step_bench.png", title)
    print(f"\n{title}, median of {_STEPS.value} steps\n")
    print(table(results))


if __name__ == "__main__":
    app.run(main)
