"""Padding and compiled programs of the canvas choices on COCO's sizes.

    python benchmarks/canvas_bench.py

Generates a size mix like COCO train2017's (a sample of 128 images: the
long side is 640 in 110, 92 landscape, 34 portrait, 2 square; the common
sizes 640x480 (35), 640x427 (12), 480x640 (9), 427x640 (6), 640x426 (5),
width x height), resizes each by the rule of each setup
(`detector.imaging.images.fitted_size`) onto the canvas the setup's config
gives it (`detector.imaging.canvases.pick`), and reports per setup: the
padded fraction of the canvas pixels (the pixels the network runs on that
hold no image), the canvas pixels per image relative to torchvision's
(each image padded to a multiple of 32 alone), and the number of compiled
programs (distinct canvas shapes), at eval's short side 800 and averaged
over the 1x config's training short sides. Writes canvas_bench.json under
--out. Pure numpy: no device needed.

`--time_predict` also times R50-FPN's jitted predict (configs/coco_r50_fpn.py,
fresh weights, `--dtype` (float32), batch `--batch`) on each single canvas of
CANVASES, median of `--reps` calls after one warm-up, on this machine's
default JAX device.
"""

import json
import math
import pathlib
import statistics
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from configs import coco_r50_fpn  # noqa: E402
from detector.imaging import canvases, images  # noqa: E402
from detector.imaging import resize as resize_lib  # noqa: E402

# name -> (config variant, canvas) of the predict timings.
CANVASES = {
    "letterbox 1024x1024": ("letterbox", (1024, 1024)),
    "shortest_edge 1344x1344": ("", (1344, 1344)),
    "shortest_edge 832x1344": ("", (832, 1344)),
}

# (width, height): count, as in the 128-image sample of COCO train2017.
_COMMON = {(640, 480): 35, (640, 427): 12, (480, 640): 9, (427, 640): 6}
_COMMON[(640, 426)] = 5
_LANDSCAPE, _PORTRAIT, _SQUARE, _LONG_640 = 92, 34, 2, 110


def coco_like_sizes(seed: int = 0) -> list[tuple[int, int]]:
    """128 (height, width) pairs with the sample's counts (docstring)."""
    rng = np.random.default_rng(seed)
    sizes = [(h, w) for (w, h), n in _COMMON.items() for _ in range(n)]
    landscape = _LANDSCAPE - sum(n for (w, h), n in _COMMON.items() if w > h)
    portrait = _PORTRAIT - sum(n for (w, h), n in _COMMON.items() if w < h)
    long_640 = _LONG_640 - len(sizes)
    others = landscape + portrait + _SQUARE
    for k in range(others):
        long = 640 if k < long_640 else int(rng.integers(300, 640))
        if k >= landscape + portrait:
            sizes.append((long, long))
            continue
        short = int(round(long * rng.uniform(0.55, 0.9)))
        sizes.append((short, long) if k < landscape else (long, short))
    return sizes


def _round_up(size: tuple[int, int], divisor: int = 32) -> tuple[int, int]:
    return tuple(int(math.ceil(s / divisor) * divisor) for s in size)


def _one_canvas(arg: str, canvas: tuple[int, int]):
    """configs/coco_r50_fpn.py's config `arg` on the one canvas `canvas`."""
    config = coco_r50_fpn.get_config(arg)
    config.data.image_size = canvas
    config.data.group_orientations = False
    return config.data


def setups() -> dict:
    """name -> config.data of each measured setup (None: torchvision's
    per-image tensors, at the 1x config's resize)."""
    one_x = coco_r50_fpn.get_config().data
    return {
        "letterbox 1024x1024 (`:letterbox`)": coco_r50_fpn.get_config(
            "letterbox"
        ).data,
        "shortest_edge, one 1344x1344 canvas (`:torchvision`)": _one_canvas(
            "", (1344, 1344)
        ),
        "shortest_edge, 832x1344 + 1344x832 by orientation (the 1x config)": (
            one_x
        ),
        "shortest_edge, torchvision (per image, x32)": None,
    }


def _rule(data, min_size: int) -> images.Resize:
    return images.Resize(data.resize, min_size, data.max_size)


def _measure_at(sizes, min_size: int) -> dict:
    """Per setup, every image resized with short side `min_size`."""
    one_x = coco_r50_fpn.get_config().data
    torchvision = sum(
        np.prod(
            _round_up(
                resize_lib.shortest_edge_size(s, min_size, one_x.max_size)
            )
        )
        for s in sizes
    )
    results = {}
    for name, data in setups().items():
        used, image_pixels, shapes = 0, 0, set()
        for size in sizes:
            if data is None:
                resized = resize_lib.shortest_edge_size(
                    size, min_size, one_x.max_size
                )
                canvas = _round_up(resized)
            else:
                canvas = canvases.pick(canvases.canvases(data), *size)
                resized = images.fitted_size(
                    size, _rule(data, min_size), canvas
                )
            shapes.add(tuple(canvas))
            used += canvas[0] * canvas[1]
            image_pixels += resized[0] * resized[1]
        results[name] = {
            "padded_fraction": 1.0 - image_pixels / used,
            "pixels_vs_torchvision": used / torchvision,
            "programs": len(shapes),
        }
    return results


def measure(sizes: list[tuple[int, int]]) -> dict:
    """Per setup at eval's size (short side 800): padded fraction, pixels
    vs torchvision's, programs; under "train", the same averaged over the
    1x config's training short sides (data.min_size)."""
    results = _measure_at(sizes, 800)
    train_sides = coco_r50_fpn.get_config().data.min_size
    per_side = [_measure_at(sizes, side) for side in train_sides]
    for name, result in results.items():
        result["train"] = {
            key: float(np.mean([r[name][key] for r in per_side]))
            for key in ("padded_fraction", "pixels_vs_torchvision")
        }
    return results


def time_predict(batch: int, reps: int, dtype: str = "float32") -> dict:
    """Median seconds per predict call of R50-FPN on each canvas.

    `dtype` is `config.model.dtype` ('auto': bfloat16 on GPU/TPU).
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from configs import coco_r50_fpn
    from detector.state import train_state

    timings = {}
    for name, (variant, canvas) in CANVASES.items():
        config = coco_r50_fpn.get_config(variant)
        config.model.backbone_init = ""
        config.model.dtype = dtype
        graphdef, params, rest = train_state.create_model(config, 0)
        graphdef = train_state.eval_graphdef(graphdef, params, rest)
        fn = jax.jit(
            lambda p, r, x, s, g=graphdef: nnx.merge(g, p, r).predict(x, s)
        )
        images = jnp.zeros((batch, *canvas, 3), jnp.float32)
        sizes = jnp.asarray([[800, 1066]] * batch, jnp.int32)
        jax.block_until_ready(fn(params, rest, images, sizes))
        seconds = []
        for _ in range(reps):
            started = time.perf_counter()
            jax.block_until_ready(fn(params, rest, images, sizes))
            seconds.append(time.perf_counter() - started)
        timings[name] = statistics.median(seconds)
    return {
        "device": jax.devices()[0].device_kind,
        "batch": batch,
        "dtype": dtype,
        "seconds": timings,
    }


def _define_flags() -> None:
    """The command's flags (defined only when run: tests import this)."""
    global _SEED, _OUT, _TIME, _BATCH, _REPS, _DTYPE
    _SEED = flags.DEFINE_integer("seed", 0, "Seed of the generated sizes.")
    _OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")
    _TIME = flags.DEFINE_bool("time_predict", False, "Also time R50 predict.")
    _BATCH = flags.DEFINE_integer("batch", 1, "Images per predict call.")
    _REPS = flags.DEFINE_integer("reps", 3, "Timed predict calls per canvas.")
    _DTYPE = flags.DEFINE_string("dtype", "float32", "config.model.dtype.")


def main(argv) -> None:
    del argv
    sizes = coco_like_sizes(_SEED.value)
    results = measure(sizes)
    print(f"{len(sizes)} COCO-like sizes (seed {_SEED.value})")
    print(
        f"{'setup':68s} {'padded':>7s} {'px/tv':>6s} {'programs':>8s} "
        f"{'train padded':>12s} {'train px/tv':>11s}"
    )
    for name, r in results.items():
        print(
            f"{name:68s} {r['padded_fraction']:7.1%} "
            f"{r['pixels_vs_torchvision']:6.2f} {r['programs']:8d} "
            f"{r['train']['padded_fraction']:12.1%} "
            f"{r['train']['pixels_vs_torchvision']:11.2f}"
        )
    report = {"images": len(sizes), "setups": results}
    if _TIME.value:
        report["predict"] = time_predict(
            _BATCH.value, _REPS.value, _DTYPE.value
        )
        for name, seconds in report["predict"]["seconds"].items():
            print(f"R50-FPN predict, {name}: {seconds * 1e3:.1f} ms per call")
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / "canvas_bench.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
