"""Train input pipeline throughput: images/s, and images/s per CPU core.

    python benchmarks/input_bench.py                      # shapes, COCO config
    python benchmarks/input_bench.py --dataset=jpeg       # 640x480 JPEGs

Builds the training pipeline of `--config` (default the COCO R50-FPN config,
1024 x 1024 input) on one of two COCO-format folders:
- `shapes`: the synthetic shapes set (128 x 128 PNGs, resized up);
- `jpeg`: real-size 640 x 480 JPEGs drawn by the shapes renderer, written
  once under `--jpeg_root` (no download needed).

It pulls `--warmup` batches, then times `--batches` batches and reports
wall-clock images/s and the process's CPU time per image (user + system,
all threads), whose inverse is the images/s one CPU core sustains: the
number that says how many cores keep a step fed. Writes input_bench.json
under --out.
"""

import json
import os
import pathlib
import sys
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402
from PIL import Image  # noqa: E402

from benchmarks import nms_bench  # noqa: E402
from detector.data import pipeline  # noqa: E402
from detector.data import shapes_writer as shapes  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    str(_REPO / "configs" / "coco_r50_fpn.py"),
    "Config whose train pipeline is timed.",
)
_DATASET = flags.DEFINE_enum(
    "dataset", "shapes", ["shapes", "jpeg"], "Which COCO-format folder to read."
)
_JPEG_ROOT = flags.DEFINE_string(
    "jpeg_root", "data/shapes_jpeg", "Where the 640x480 JPEG folder lives."
)
_JPEG_IMAGES = flags.DEFINE_integer(
    "jpeg_images", 256, "Images in the JPEG folder."
)
_BATCHES = flags.DEFINE_integer("batches", 20, "Timed batches.")
_WARMUP = flags.DEFINE_integer("warmup", 3, "Untimed batches first.")
_TARGET = flags.DEFINE_float(
    "target", 145.0, "Step images/s the input must sustain."
)
_HOST_CORES = flags.DEFINE_integer(
    "host_cores", 16, "Cores of the GPU host to project to."
)
_OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")

JPEG_SIZE = (480, 640)  # (height, width)
JPEG_DESCRIPTION = "flax-maskrcnn shapes as 640x480 JPEGs"


def write_jpeg_folder(root: str, count: int, seed: int = 0) -> str:
    """COCO folder `root` (split 'train') of `count` 640x480 JPEG shapes.

    Each image is the shapes renderer's 640 x 640 image cut to its top 480
    rows; instances left with no visible pixel are dropped. Returns the
    split's JSON path; an existing folder with the same info is reused.
    """
    info = {"description": JPEG_DESCRIPTION, "num_images": count, "seed": seed}
    path = shapes.annotation_path(root, "train")
    if os.path.exists(path):
        with open(path) as f:
            if json.load(f).get("info") == info:
                return path
    height, width = JPEG_SIZE
    os.makedirs(os.path.join(root, "train"), exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images, annotations = [], []
    for index in range(count):
        rng = np.random.default_rng([seed, index])
        pixels, instances = shapes.render_image(rng, width)
        image_id = index + 1
        file_name = f"{image_id:06d}.jpg"
        Image.fromarray(pixels[:height]).save(
            os.path.join(root, "train", file_name), quality=90
        )
        images.append(
            {
                "id": image_id,
                "file_name": file_name,
                "height": height,
                "width": width,
            }
        )
        for category, mask in instances:
            mask = mask[:height]
            if mask.any():
                annotations.append(
                    shapes._annotation(
                        mask, category, len(annotations) + 1, image_id
                    )
                )
    with open(path, "w") as f:
        json.dump(
            {
                "info": info,
                "licenses": [],
                "images": images,
                "annotations": annotations,
                "categories": list(shapes.CATEGORIES),
            },
            f,
        )
    return path


def _configure(config) -> None:
    """Points the config at the chosen folder (3 shapes classes)."""
    data = config.data
    data.num_classes = len(shapes.CATEGORIES)
    data.train_split = "train"
    if _DATASET.value == "shapes":
        if data.source != "shapes":
            data.source, data.root = "shapes", "data/shapes"
    else:
        write_jpeg_folder(_JPEG_ROOT.value, _JPEG_IMAGES.value)
        data.source, data.root = "coco_json", _JPEG_ROOT.value


def measure(config, batches: int, warmup: int) -> dict:
    """Wall and CPU time of `batches` train batches after `warmup`."""
    pipeline.prepare(config)  # writes the shapes set when missing
    source = pipeline.train_batches(config)
    for _ in range(warmup):
        next(source)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(source)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    images = batches * config.train.batch_size
    return {
        "images": images,
        "wall_s": wall,
        "cpu_s": cpu,
        "images_per_sec": images / wall,
        "cores_busy": cpu / wall,
        "images_per_sec_per_core": images / cpu,
    }


def main(argv) -> None:
    del argv
    config = _CONFIG.value
    _configure(config)
    result = measure(config, _BATCHES.value, _WARMUP.value)
    per_core = result["images_per_sec_per_core"]
    result.update(
        dataset=_DATASET.value,
        image_size=list(config.data.image_size),
        batch_size=config.train.batch_size,
        machine=nms_bench.machine(),
        projected_host_images_per_sec=per_core * _HOST_CORES.value,
        cores_for_target=_TARGET.value / per_core,
    )
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"input_bench_{_DATASET.value}.json").write_text(
        json.dumps(result, indent=2)
    )
    print(
        f"\n{_DATASET.value}: {result['images_per_sec']:.1f} img/s on "
        f"{result['cores_busy']:.2f} busy cores of "
        f"{result['machine']['cpu_count']}; {per_core:.1f} img/s per core "
        f"-> {result['projected_host_images_per_sec']:.0f} img/s on "
        f"{_HOST_CORES.value} cores; {result['cores_for_target']:.1f} cores "
        f"feed {_TARGET.value:g} img/s"
    )


if __name__ == "__main__":
    app.run(main)
