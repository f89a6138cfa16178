"""What reading every image's header costs at start-up, on COCO's 118k
training images: the COCO folder's size check and the TFDS orientation
index's header read.

    python benchmarks/header_check_bench.py [--images 118287]

Headers only matter, so the images are one small JPEG (with an EXIF
orientation tag, as a phone photo has) written --images times; the page
cache holds them (a first read from a cold disk adds one small read per
file). `coco_folder`: `CocoFolder` built on the folder with and without
its size check (`_check_image_sizes`), the difference being the check.
`tfds`: the header read of `sources/tfds.py` (`_header`, as the
orientation index maps it) over --images in-memory records. Prints one
JSON object: seconds in all and per 1000 images for each.
"""

import argparse
import io
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

import numpy as np
from PIL import Image

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from detector.data import coco_folder  # noqa: E402

WIDTH, HEIGHT = 64, 48


def _jpeg() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 1  # orientation: as stored
    out = io.BytesIO()
    Image.fromarray(np.full((HEIGHT, WIDTH, 3), 128, np.uint8)).save(
        out, "JPEG", exif=exif
    )
    return out.getvalue()


def _write_folder(root: pathlib.Path, count: int, data: bytes) -> None:
    (root / "annotations").mkdir(parents=True)
    (root / "train").mkdir()
    images = []
    for i in range(1, count + 1):
        name = f"{i:012d}.jpg"
        (root / "train" / name).write_bytes(data)
        images.append(
            {"id": i, "file_name": name, "height": HEIGHT, "width": WIDTH}
        )
    dataset = {
        "images": images,
        "annotations": [],
        "categories": [{"id": 1, "name": "thing"}],
    }
    (root / "annotations" / "instances_train.json").write_text(
        json.dumps(dataset)
    )


def _folder_seconds(root: pathlib.Path, check: bool) -> float:
    original = coco_folder.CocoFolder._check_image_sizes
    if not check:
        coco_folder.CocoFolder._check_image_sizes = lambda self: None
    try:
        started = time.perf_counter()
        coco_folder.CocoFolder(str(root), "train", 1)
        return time.perf_counter() - started
    finally:
        coco_folder.CocoFolder._check_image_sizes = original


def _tfds_seconds(count: int, data: bytes) -> float:
    import tensorflow as tf

    from detector.data.sources import tfds

    records = tf.data.Dataset.from_tensor_slices(
        {
            "image": tf.fill([count], tf.constant(data)),
            "image/id": tf.range(count, dtype=tf.int64),
        }
    )

    def row(record):
        header = tfds._header(record, "coco")
        return tf.stack(
            [header["image/id"], tf.cast(header["height"], tf.int64)]
        )

    dataset = records.map(
        row, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).batch(4096)
    started = time.perf_counter()
    for _ in dataset.as_numpy_iterator():
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=118287)
    args = parser.parse_args()
    data = _jpeg()
    with tempfile.TemporaryDirectory() as folder:
        root = pathlib.Path(folder)
        _write_folder(root, args.images, data)
        _folder_seconds(root, check=True)  # warm the page cache
        without = _folder_seconds(root, check=False)
        with_check = _folder_seconds(root, check=True)
    tfds_s = _tfds_seconds(args.images, data)
    per_k = 1000 / args.images
    print(
        json.dumps(
            {
                "images": args.images,
                "coco_folder_check_s": round(with_check - without, 2),
                "coco_folder_check_s_per_1000": round(
                    (with_check - without) * per_k, 3
                ),
                "coco_folder_load_without_check_s": round(without, 2),
                "tfds_headers_s": round(tfds_s, 2),
                "tfds_headers_s_per_1000": round(tfds_s * per_k, 3),
                "load_average": os.getloadavg(),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            }
        )
    )


if __name__ == "__main__":
    main()
