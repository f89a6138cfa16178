"""Times every NMS backend on four deterministic workloads.

    python benchmarks/nms_bench.py [--reps 50] [--out benchmarks/out]
    python benchmarks/nms_bench.py \
        --backends=while_loop,pallas_triton,pallas_mosaic_gpu  # CUDA kernels

Workloads:
  W1 seed       N=1024 boxes in a 1024x1024 image, K=128, IoU 0.1
  W2 rpn        N=6000 RPN-like boxes in 800x800, K=1000, IoU 0.7
  W3 rpn-batch  8 images x N=2000 of the W2 kind, K=1000, IoU 0.7
  W4 detect     N=5000 boxes of 80 classes, class-aware, K=100, IoU 0.5,
                score threshold 0.05

Beside our backends it times, in the same run, TensorFlow's C++
`tf.image.non_max_suppression` on CPU and, when torch with CUDA is present,
`torchvision.ops.nms` on the GPU; without TensorFlow it says so in one line
and times the rest. Every backend's output is checked against
the numpy reference before it is timed. Reports the median of `--reps`
timed runs after warm-up (device-synchronised), prints a table, and writes
nms_bench.json and nms_bench.png under --out.

`--backends` takes any of ops.nms.BACKENDS: on a CUDA GPU `pallas` runs
the Triton kernel where JAX has it (ops/nms/pallas.py, CUDA_KERNELS),
`pallas_mosaic_gpu` the Mosaic GPU one (on CPU
`pallas_mosaic_gpu` runs in Pallas' GPU interpret mode, which says nothing
about its speed). The table adds the ratio of the Mosaic GPU kernel to the
Triton one where both are timed.
"""

import argparse
import dataclasses
import functools
import json
import os
import pathlib
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from ops import nms as nms_lib  # noqa: E402
from ops.nms import reference  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    boxes: np.ndarray  # f32[B, N, 4] or f32[N, 4]
    scores: np.ndarray
    classes: np.ndarray | None
    max_output_size: int
    iou_threshold: float
    score_threshold: float | None = None


def _rpn_boxes(rng, shape, extent=800.0):
    centres = rng.uniform(0.0, extent, shape + (2,))
    sizes = rng.uniform(10.0, 200.0, shape + (2,))
    return np.concatenate(
        [centres - sizes / 2, centres + sizes / 2], axis=-1
    ).astype(np.float32)


def make_workloads(seed: int = 0) -> list[Workload]:
    """The four workloads of the module docstring, from one seed."""
    rng = np.random.default_rng(seed)
    top_left = rng.uniform(0.0, 1023.0, (1024, 2))
    sizes = rng.uniform(1.0, 1024.0, (1024, 2))
    w1 = np.concatenate([top_left, np.minimum(top_left + sizes, 1023.0)], -1)
    return [
        Workload(
            "W1 seed",
            w1.astype(np.float32),
            rng.random(1024, dtype=np.float32),
            None,
            128,
            0.1,
        ),
        Workload(
            "W2 rpn",
            _rpn_boxes(rng, (6000,)),
            rng.random(6000, dtype=np.float32),
            None,
            1000,
            0.7,
        ),
        Workload(
            "W3 rpn-batch",
            _rpn_boxes(rng, (8, 2000)),
            rng.random((8, 2000), dtype=np.float32),
            None,
            1000,
            0.7,
        ),
        Workload(
            "W4 detect",
            _rpn_boxes(rng, (5000,), extent=1000.0),
            rng.random(5000, dtype=np.float32),
            rng.integers(0, 80, 5000).astype(np.int32),
            100,
            0.5,
            0.05,
        ),
    ]


def time_call(fn: Callable[[], object], reps: int, warmup: int) -> dict:
    """Median/p10/p90 wall time in ms of fn(), which must synchronise."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    p10, median, p90 = np.percentile(times, [10, 50, 90])
    return {
        "median_ms": float(median),
        "p10_ms": float(p10),
        "p90_ms": float(p90),
        "reps": reps,
    }


def ours(w: Workload, backend: str) -> Callable[[], object]:
    """A synchronised call of our operator, checked against the reference."""
    call = jax.jit(
        functools.partial(
            nms_lib.nms,
            max_output_size=w.max_output_size,
            iou_threshold=w.iou_threshold,
            score_threshold=w.score_threshold,
            backend=backend,
        )
    )
    args = jax.device_put((w.boxes, w.scores, w.classes))
    indices, num = call(args[0], args[1], classes=args[2])
    want = reference.nms(
        w.boxes,
        w.scores,
        classes=w.classes,
        max_output_size=w.max_output_size,
        iou_threshold=w.iou_threshold,
        score_threshold=w.score_threshold,
    )
    np.testing.assert_array_equal(
        np.asarray(indices), want[0], err_msg=f"{backend} on {w.name}"
    )
    return lambda: jax.block_until_ready(
        call(args[0], args[1], classes=args[2])
    )


def _offset_by_class(boxes, classes):
    """The usual class-aware trick for class-agnostic NMS ops."""
    return boxes + (classes[:, None] * (boxes.max() + 1.0)).astype(boxes.dtype)


@functools.cache
def _tensorflow():
    """The tensorflow module on the CPU, or None (said once) if missing."""
    try:
        import tensorflow as tf
    except ImportError:
        print(
            "tensorflow is not installed: skipping the TensorFlow C++ anchor",
            flush=True,
        )
        return None
    tf.config.set_visible_devices([], "GPU")
    return tf


def tensorflow_cpu(w: Workload) -> Callable[[], object] | None:
    """tf.image.non_max_suppression (C++ CPU kernel), one call per image."""
    tf = _tensorflow()
    if tf is None:
        return None
    boxes = (
        w.boxes if w.classes is None else _offset_by_class(w.boxes, w.classes)
    )
    boxes = boxes.reshape(-1, boxes.shape[-2], 4)[..., [1, 0, 3, 2]]
    scores = w.scores.reshape(-1, w.scores.shape[-1])
    threshold = (
        float("-inf") if w.score_threshold is None else w.score_threshold
    )

    @tf.function
    def run(boxes, scores):
        return [
            tf.image.non_max_suppression(
                boxes[i],
                scores[i],
                w.max_output_size,
                w.iou_threshold,
                threshold,
            )
            for i in range(boxes.shape[0])
        ]

    with tf.device("/CPU:0"):
        args = tf.constant(boxes), tf.constant(scores)
        return lambda: [x.numpy() for x in run(*args)]


def torchvision_cuda(w: Workload) -> Callable[[], object] | None:
    """torchvision.ops.nms / batched_nms on CUDA, when available."""
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    boxes = torch.as_tensor(w.boxes.reshape(-1, 4), device="cuda")
    scores = torch.as_tensor(w.scores.reshape(-1), device="cuda")
    n = w.boxes.shape[-2]
    if w.classes is not None:
        groups = torch.as_tensor(w.classes.reshape(-1), device="cuda")
    else:
        groups = torch.arange(boxes.shape[0], device="cuda") // n

    def run():
        keep_scores, keep_boxes, keep_groups = scores, boxes, groups
        if w.score_threshold is not None:
            mask = scores > w.score_threshold
            keep_scores, keep_boxes, keep_groups = (
                scores[mask],
                boxes[mask],
                groups[mask],
            )
        keep = torchvision.ops.batched_nms(
            keep_boxes, keep_scores, keep_groups, w.iou_threshold
        )
        torch.cuda.synchronize()
        return keep

    return run


def machine() -> dict:
    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "python": platform.python_version(),
    }


def run_all(reps: int, warmup: int, backends: list[str]) -> dict:
    results = {}
    for w in make_workloads():
        row = {}
        for backend in backends:
            row[backend] = time_call(ours(w, backend), reps, warmup)
        for name, make in (
            ("tensorflow (C++ CPU)", tensorflow_cpu),
            ("torchvision (CUDA)", torchvision_cuda),
        ):
            fn = make(w)
            if fn is not None:
                row[name] = time_call(fn, reps, warmup)
        results[w.name] = row
        print(
            f"{w.name}: "
            + ", ".join(f"{k} {v['median_ms']:.3f} ms" for k, v in row.items()),
            flush=True,
        )
    return results


# Ratio columns of the table: (slower, faster) backend, where both ran.
RATIOS = (("while_loop", "pallas"), ("pallas_triton", "pallas_mosaic_gpu"))


def table(results: dict) -> str:
    names = list(next(iter(results.values())))
    ratios = [r for r in RATIOS if all(n in names for n in r)] or RATIOS[:1]
    lines = [
        "| workload | "
        + " | ".join(names)
        + "".join(f" | {fast} vs {slow}" for slow, fast in ratios)
        + " |",
        "|---" * (len(names) + len(ratios) + 1) + "|",
    ]
    for workload, row in results.items():
        cells = [
            f"{row[n]['median_ms']:.3f}" if n in row else "-" for n in names
        ]
        for slow, fast in ratios:
            speedup = (
                row[slow]["median_ms"] / row[fast]["median_ms"]
                if fast in row and slow in row
                else float("nan")
            )
            cells.append(f"{speedup:.1f}x")
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(results.values())))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [
            row.get(name, {}).get("median_ms", np.nan)
            for row in results.values()
        ]
        ax.bar(np.arange(len(results)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(results)) + width * (len(names) - 1) / 2)
    ax.set_xticklabels(list(results))
    ax.set_yscale("log")
    ax.set_ylabel("median ms (log scale)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", default="cpu,while_loop,pallas")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("benchmarks/out")
    )
    args = parser.parse_args()
    info = machine()
    results = run_all(args.reps, args.warmup, args.backends.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nms_bench.json").write_text(
        json.dumps({"machine": info, "results": results}, indent=2)
    )
    title = (
        f"NMS backends on {info['platform']} ({info['device_kind']}, "
        f"{info['cpu_count']} cores)"
    )
    plot(results, args.out / "nms_bench.png", title)
    print(f"\n{title}, median ms of {args.reps} runs\n")
    print(table(results))


if __name__ == "__main__":
    main()
