"""The cost of each mask target rule: its targets' time in the step and its
GT masks' bytes in the batch.

    python benchmarks/mask_target_bench.py [--canvas=1344,1344] [--images=2]

For every rule of modeling/mask_targets.RULES it builds a batch of
`--images` images with `--instances` random GT masks each in the layout the
rule reads (config/data.py MASK_LAYOUTS), `--rois` mask rois per image, and
times the jitted targets (median of `--steps` after `--warmup`,
device-synchronised). Prints a table and writes mask_target_bench.json
under --out.
"""

import json
import pathlib
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import jax  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from detector.config import data as data_config  # noqa: E402
from detector.modeling import mask_targets  # noqa: E402

_CANVAS = flags.DEFINE_list("canvas", ["1344", "1344"], "Canvas height,width.")
_IMAGES = flags.DEFINE_integer("images", 2, "Images per batch.")
_INSTANCES = flags.DEFINE_integer("instances", 20, "GT masks per image.")
_MAX_INSTANCES = flags.DEFINE_integer(
    "max_instances", 100, "data.max_instances: GT rows per image."
)
_ROIS = flags.DEFINE_integer("rois", 128, "Mask rois per image.")
_GT_MASK_SIZE = flags.DEFINE_integer("gt_mask_size", 112, "Crop side.")
_MASK_SIZE = flags.DEFINE_integer("mask_size", 28, "Target side M.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed calls.")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed calls first.")
_OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")


def _case(rng: np.random.Generator, layout: str, data) -> tuple:
    """(rois, matched, gt_boxes, gt_masks, image_sizes) of random GT."""
    height, width = data.image_size
    b, g, m = _IMAGES.value, _INSTANCES.value, data.max_instances
    x1 = rng.uniform(0, width * 0.7, (b, m))
    y1 = rng.uniform(0, height * 0.7, (b, m))
    boxes = np.stack(
        [
            x1,
            y1,
            x1 + rng.uniform(8, width * 0.3, (b, m)),
            y1 + rng.uniform(8, height * 0.3, (b, m)),
        ],
        -1,
    ).astype(np.float32)
    shape = data_config.gt_masks_shape(layout, data)
    masks = np.zeros((b, *shape), np.uint8)
    masks[:, :g] = rng.integers(0, 256, (b, g, *shape[1:]), np.uint8)
    if layout == "crop":
        masks[:, :g] &= 1
    matched = rng.integers(0, g, (b, _ROIS.value)).astype(np.int32)
    jitter = rng.uniform(-4, 4, (b, _ROIS.value, 4)).astype(np.float32)
    rois = np.take_along_axis(boxes, matched[..., None], axis=1) + jitter
    rois = np.clip(rois, 0, [width, height, width, height]).astype(np.float32)
    sizes = np.tile(np.asarray([[height, width]], np.int32), (b, 1))
    return rois, matched, boxes, masks, sizes


def _median_ms(fn, args) -> float:
    for _ in range(_WARMUP.value):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(_STEPS.value):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main(argv) -> None:
    del argv
    data = ml_collections.ConfigDict(
        {
            "image_size": tuple(int(v) for v in _CANVAS.value),
            "max_instances": _MAX_INSTANCES.value,
            "gt_mask_size": _GT_MASK_SIZE.value,
        }
    )
    rng = np.random.default_rng(0)
    rows = {}
    for rule, layout in data_config.MASK_LAYOUTS.items():
        args = _case(rng, layout, data)
        fn = jax.jit(
            lambda *a, rule=rule: mask_targets.RULES[rule](
                *a, mask_size=_MASK_SIZE.value, sampling_ratio=2
            )
        )
        per_image = int(np.prod(data_config.gt_masks_shape(layout, data)))
        rows[rule] = {
            "layout": layout,
            "median_ms": _median_ms(fn, args),
            "gt_mask_bytes_per_image": per_image,
        }
    device = jax.devices()[0]
    print(
        f"\nMask targets on {data.image_size[0]} x {data.image_size[1]}, "
        f"{_IMAGES.value} images x {_ROIS.value} mask rois, "
        f"{_INSTANCES.value} GT each ({data.max_instances} rows), "
        f"{device.platform} ({device.device_kind})\n"
    )
    print("| rule | layout | targets median ms | GT mask bytes / image |")
    print("|---|---|---|---|")
    for rule, row in rows.items():
        print(
            f"| {rule} | {row['layout']} | {row['median_ms']:.1f} | "
            f"{row['gt_mask_bytes_per_image']:,} |"
        )
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mask_target_bench.json").write_text(
        json.dumps(
            {
                "canvas": list(data.image_size),
                "images": _IMAGES.value,
                "rois": _ROIS.value,
                "instances": _INSTANCES.value,
                "device": device.device_kind,
                "rules": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    app.run(main)
