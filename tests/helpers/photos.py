"""JPEG 'photos' of assorted sizes, orientations and modes, written here.

    paths = photos.write(folder)  # name -> path, in PHOTOS order

Each is a smooth picture with a few bright shapes (so a randomised
detector's features vary), written by PIL at quality 90: the same files on
every run of the same PIL. `ids` gives each a COCO image id, `coco_json`
the COCO-format annotations a folder source reads them by.
"""

import json
import pathlib

import numpy as np
from PIL import Image

# name -> (width, height) as stored, PIL mode, EXIF orientation (1: none).
PHOTOS = {
    "landscape": ((640, 480), "RGB", 1),
    "portrait": ((427, 640), "RGB", 1),
    "wide": ((1000, 200), "RGB", 1),
    "small": ((60, 45), "RGB", 1),
    "exif_rotated": ((640, 480), "RGB", 6),  # shown 480 wide, 640 high
    "grayscale": ((500, 375), "L", 1),
}
_ORIENTATION_TAG = 0x0112


def _pixels(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:height, :width] / max(width, height)
    image = 90 + 60 * np.sin(6 * xx + rng.uniform(0, 6)) * np.cos(
        4 * yy + rng.uniform(0, 6)
    )
    image = np.repeat(image[..., None], 3, axis=-1) + rng.uniform(
        -30, 30, (1, 1, 3)
    )
    for _ in range(5):
        cx, cy = rng.uniform(0.1, 0.9) * width, rng.uniform(0.1, 0.9) * height
        rx = rng.uniform(0.05, 0.25) * width
        ry = rng.uniform(0.05, 0.25) * height
        inside = ((np.arange(width)[None] - cx) / rx) ** 2 + (
            (np.arange(height)[:, None] - cy) / ry
        ) ** 2 <= 1
        image[inside] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def write(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Writes every PHOTOS file as folder/<name>.jpg; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for seed, (name, ((width, height), mode, turn)) in enumerate(
        PHOTOS.items()
    ):
        image = Image.fromarray(_pixels(width, height, seed))
        if mode == "L":
            image = image.convert("L")
        exif = Image.Exif()
        if turn != 1:
            exif[_ORIENTATION_TAG] = turn
        path = folder / f"{name}.jpg"
        image.save(path, quality=90, exif=exif.tobytes())
        paths[name] = path
    return paths


def ids() -> dict[str, int]:
    """name -> COCO image id (1, 2, ... in PHOTOS order)."""
    return {name: i for i, name in enumerate(PHOTOS, start=1)}


def coco_json(paths: dict[str, pathlib.Path], categories: list[dict]) -> dict:
    """COCO-format annotations of the photos (sizes as shown, EXIF turned),
    one small box each so that COCOeval has ground truth."""
    images, annotations = [], []
    for name, path in paths.items():
        (width, height), _, turn = PHOTOS[name]
        if turn in (5, 6, 7, 8):
            width, height = height, width
        images.append(
            {
                "id": ids()[name],
                "file_name": path.name,
                "width": width,
                "height": height,
            }
        )
        box = [1.0, 1.0, width / 4, height / 4]
        annotations.append(
            {
                "id": ids()[name],
                "image_id": ids()[name],
                "category_id": categories[0]["id"],
                "bbox": box,
                "area": box[2] * box[3],
                "iscrowd": 0,
                "segmentation": [
                    [1, 1, 1 + box[2], 1, 1 + box[2], 1 + box[3], 1, 1 + box[3]]
                ],
            }
        )
    return {
        "images": images,
        "annotations": annotations,
        "categories": categories,
    }


def write_coco_folder(root: pathlib.Path, split: str, categories) -> dict:
    """root/<split>/*.jpg and root/annotations/instances_<split>.json."""
    paths = write(root / split)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / f"instances_{split}.json").write_text(
        json.dumps(coco_json(paths, categories))
    )
    return paths
