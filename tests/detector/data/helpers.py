"""Helpers of the data tests: small COCO-format folders and their configs."""

import json
import os

import ml_collections
import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from configs import shapes as shapes_config

# Pure colours of classes 1, 2, 3 in the colour-coded folders.
CLASS_COLOURS = {1: (255, 0, 0), 2: (0, 255, 0), 3: (0, 0, 255)}


def annotation(
    mask: np.ndarray,
    category: int,
    annotation_id: int,
    image_id: int,
    iscrowd: int = 0,
) -> dict:
    """A COCO annotation with an RLE segmentation and the mask's tight box."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": category,
        "iscrowd": iscrowd,
        "bbox": [
            int(cols[0]),
            int(rows[0]),
            int(cols[-1] + 1 - cols[0]),
            int(rows[-1] + 1 - rows[0]),
        ],
        "area": int(mask.sum()),
        "segmentation": {
            "size": list(rle["size"]),
            "counts": rle["counts"].decode("ascii"),
        },
    }


def write_folder(
    root: str,
    split: str,
    images: list[np.ndarray],
    annotations: list[dict],
    num_classes: int = 3,
) -> str:
    """Writes PNGs (ids 1..n) and instances_<split>.json; returns the JSON."""
    os.makedirs(os.path.join(root, split), exist_ok=True)
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    entries = []
    for image_id, pixels in enumerate(images, start=1):
        name = f"{image_id:04d}.png"
        Image.fromarray(pixels).save(os.path.join(root, split, name))
        entries.append(
            {
                "id": image_id,
                "file_name": name,
                "height": pixels.shape[0],
                "width": pixels.shape[1],
            }
        )
    path = os.path.join(root, "annotations", f"instances_{split}.json")
    with open(path, "w") as f:
        json.dump(
            {
                "images": entries,
                "annotations": annotations,
                "categories": [
                    {"id": c, "name": f"c{c}"}
                    for c in range(1, num_classes + 1)
                ],
            },
            f,
        )
    return path


def colour_coded_image(
    rng: np.random.Generator, height: int, width: int
) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """Black image with a rectangle (1), disc (2), right triangle (3).

    Each class is painted in its pure colour; shapes do not overlap (each
    lives in its own third of the width).
    """
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    image = np.zeros((height, width, 3), np.uint8)
    instances = []
    third = width / 3
    for category in (1, 2, 3):
        side = rng.uniform(0.55, 0.9) * third
        cx = third * (category - 0.5) + rng.uniform(-1, 1) * (third - side) / 2
        cy = rng.uniform(side / 2, height - side / 2)
        dx, dy = xs - cx, ys - cy
        if category == 1:
            mask = (np.abs(dx) <= side / 2) & (np.abs(dy) <= side / 3)
        elif category == 2:
            mask = dx * dx + dy * dy <= (side / 2) ** 2
        else:  # right angle at the bottom left: not mirror symmetric
            mask = (dx >= -side / 2) & (dy <= side / 2) & (dy - dx >= 0)
        image[mask] = CLASS_COLOURS[category]
        instances.append((category, mask))
    return image, instances


def write_colour_coded(
    root: str,
    split: str,
    num_images: int,
    height: int,
    width: int,
    seed: int = 0,
) -> None:
    """A folder of colour-coded images (see colour_coded_image)."""
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        pixels, instances = colour_coded_image(rng, height, width)
        images.append(pixels)
        for category, mask in instances:
            annotations.append(
                annotation(mask, category, len(annotations) + 1, image_id)
            )
    write_folder(root, split, images, annotations)


def small_config(
    root: str, source: str = "coco_json"
) -> ml_collections.ConfigDict:
    """Shapes-style config over `root`: 64x80 input, batches of 4."""
    config = shapes_config.get_config()
    data = config.data
    data.source = source
    data.root = root
    data.image_size = (64, 80)
    data.max_instances = 4
    data.gt_mask_size = 16
    data.cache = False
    data.shapes.num_train = 12
    data.shapes.num_val = 5
    data.shapes.image_size = 64
    config.train.batch_size = 4
    config.eval.batch_size = 2
    return config
