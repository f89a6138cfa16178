"""The synthetic shapes set written in COCO format (`data.source='shapes'`):
python -m detector.data.shapes_writer --out OUT --num_train N --num_val M
"""

import argparse
import contextlib
import json
import os
import shutil
from collections.abc import Sequence

import numpy as np
from absl import logging
from PIL import Image

from detector.utils import progress

CATEGORIES = (
    {"id": 1, "name": "circle", "supercategory": "shape"},
    {"id": 2, "name": "rectangle", "supercategory": "shape"},
    {"id": 3, "name": "triangle", "supercategory": "shape"},
)
SPLITS = ("train", "val")
MAX_OBJECTS = 6
EMPTY_IMAGE_FRACTION = 0.05
# Object size range as a fraction of the image side: 12-56 px at 128 px.
MIN_SIZE_FRACTION = 12 / 128
MAX_SIZE_FRACTION = 56 / 128
MIN_VISIBLE_FRACTION = 0.3
PLACEMENT_TRIES = 8
MIN_COLOUR_DISTANCE = 80.0
# Bumped whenever the rendering changes, so stale folders are rewritten.
GENERATOR_VERSION = 1
DESCRIPTION = "flax-maskrcnn synthetic shapes"
# Smallest image side: objects stay at least a few pixels across.
MIN_IMAGE_SIZE = 32


def _random_colour(
    rng: np.random.Generator, avoid: Sequence[np.ndarray]
) -> np.ndarray:
    """A saturated colour at least MIN_COLOUR_DISTANCE from every `avoid`."""
    colour = np.zeros(3)
    for _ in range(32):
        hue = rng.uniform(0.0, 6.0)
        saturation = rng.uniform(0.55, 1.0)
        value = rng.uniform(0.55, 1.0)
        # HSV -> RGB on the six hue sectors.
        ramp = 1.0 - np.abs(hue % 2.0 - 1.0)
        sector = int(hue)
        order = [
            (1, ramp, 0),
            (ramp, 1, 0),
            (0, 1, ramp),
            (0, ramp, 1),
            (ramp, 0, 1),
            (1, 0, ramp),
        ][sector]
        base = value * (1.0 - saturation)
        colour = 255.0 * (base + (value - base) * np.asarray(order, float))
        if all(
            np.linalg.norm(colour - other) >= MIN_COLOUR_DISTANCE
            for other in avoid
        ):
            break
    return colour


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A low-saturation background: a gentle gradient and a soft ripple."""
    grey = rng.uniform(30.0, 220.0)
    tint = rng.uniform(-15.0, 15.0, size=3)
    ramp = np.linspace(-1.0, 1.0, size, dtype=np.float32)
    slope = rng.uniform(-12.0, 12.0, size=2)
    frequency = rng.uniform(1.0, 4.0, size=2) * np.pi
    phase = rng.uniform(0.0, 2 * np.pi, size=2)
    rows = slope[0] * ramp + 3.0 * np.sin(frequency[0] * ramp + phase[0])
    cols = slope[1] * ramp + 3.0 * np.sin(frequency[1] * ramp + phase[1])
    shade = rows[:, None] + cols[None, :]
    return (grey + tint).astype(np.float32) + shade[..., None]


def _shape_mask(
    rng: np.random.Generator,
    category: int,
    side: float,
    centre: np.ndarray,
    size: int,
) -> np.ndarray:
    """The filled shape of `category` as a bool [size, size] mask."""
    top, left = (int(v) for v in np.floor(centre - side / 2).clip(0, size))
    bottom, right = (int(v) for v in np.ceil(centre + side / 2).clip(0, size))
    # Offsets of the pixel centres in the shape's window from its centre.
    dy = (np.arange(top, bottom) + 0.5 - centre[0])[:, None]
    dx = (np.arange(left, right) + 0.5 - centre[1])[None, :]
    if category == 1:  # circle
        inside = dy * dy + dx * dx <= (side / 2) ** 2
    elif category == 2:  # rectangle (squares included)
        half_h = side / 2 * rng.uniform(0.55, 1.0)
        half_w = side / 2 * rng.uniform(0.55, 1.0)
        inside = (np.abs(dy) <= half_h) & (np.abs(dx) <= half_w)
    else:  # triangle: three vertices around the centre, near equilateral
        angles = rng.uniform(0, 2 * np.pi) + np.deg2rad(
            [0.0, 120.0, 240.0] + rng.uniform(-20.0, 20.0, size=3)
        )
        vy, vx = side / 2 * np.sin(angles), side / 2 * np.cos(angles)
        inside = np.ones((bottom - top, right - left), bool)
        for i in range(3):
            j = (i + 1) % 3
            # Vertices by increasing angle: the inside is left of each edge.
            inside &= (
                (vx[j] - vx[i]) * (dy - vy[i]) - (vy[j] - vy[i]) * (dx - vx[i])
            ) >= 0
    mask = np.zeros((size, size), bool)
    mask[top:bottom, left:right] = inside
    return mask


def render_image(
    rng: np.random.Generator, size: int
) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """Draws one image; returns it (uint8 [size, size, 3]) and its instances.

    A lightly textured background with 0..MAX_OBJECTS filled shapes in
    distinct colours. Instances are (category id, visible bool mask) in
    drawing order: a shape's visible part once later shapes are painted
    on top; a placement that covers no pixel, or would leave an earlier
    shape under MIN_VISIBLE_FRACTION visible, is retried or dropped.
    """
    image = _background(rng, size)
    colours = [image.reshape(-1, 3).mean(axis=0)]
    visible, full_areas, categories = [], [], []
    num_objects = (
        0
        if rng.uniform() < EMPTY_IMAGE_FRACTION
        else int(rng.integers(1, MAX_OBJECTS + 1))
    )
    for _ in range(num_objects):
        category = int(rng.integers(1, len(CATEGORIES) + 1))
        side = size * rng.uniform(MIN_SIZE_FRACTION, MAX_SIZE_FRACTION)
        for _ in range(PLACEMENT_TRIES):
            centre = rng.uniform(side / 2, size - side / 2, size=2)
            mask = _shape_mask(rng, category, side, centre, size)
            remaining = [v & ~mask for v in visible]
            # A shape too small to cover a pixel centre is placed again.
            if mask.any() and all(
                np.count_nonzero(r) >= MIN_VISIBLE_FRACTION * area
                for r, area in zip(remaining, full_areas, strict=True)
            ):
                break
        else:
            continue  # no placement keeps the others visible: drop it
        colour = _random_colour(rng, colours)
        colours.append(colour)
        image[mask] = colour
        visible = remaining + [mask]
        full_areas.append(np.count_nonzero(mask))
        categories.append(category)
    pixels = np.clip(np.rint(image), 0, 255).astype(np.uint8)
    return pixels, list(zip(categories, visible, strict=True))


def _annotation(
    mask: np.ndarray, category: int, annotation_id: int, image_id: int
) -> dict:
    """A COCO annotation (RLE segmentation, tight box) for one bool mask."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    x, y = int(cols[0]), int(rows[0])
    width, height = int(cols[-1]) + 1 - x, int(rows[-1]) + 1 - y
    from pycocotools import mask as mask_utils  # only to write a dataset

    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": category,
        "iscrowd": 0,
        "bbox": [x, y, width, height],
        "area": int(mask.sum()),
        "segmentation": {
            "size": list(rle["size"]),
            "counts": rle["counts"].decode("ascii"),
        },
    }


def dataset_info(num_images: int, image_size: int, seed: int) -> dict:
    """The `info` block that identifies a written split and its parameters."""
    return {
        "description": DESCRIPTION,
        "version": GENERATOR_VERSION,
        "num_images": num_images,
        "image_size": image_size,
        "seed": seed,
    }


def annotation_path(out_dir: str, split: str) -> str:
    """OUT/annotations/instances_<split>.json."""
    return os.path.join(out_dir, "annotations", f"instances_{split}.json")


# What data.source='shapes' is, for a data.root that holds other data.
_SYNTHETIC = (
    "data.source='shapes' (the :shapes variant) writes and trains on "
    "synthetic shapes; to train on this folder's data, use "
    "--config.data.source=coco_json (or drop :shapes)"
)


def _written_here(path: str) -> bool:
    """Whether annotation file `path` is one this writer wrote."""
    try:
        with open(path) as f:
            info = json.load(f).get("info")
    except (OSError, ValueError, AttributeError):
        info = None
    return isinstance(info, dict) and info.get("description") == DESCRIPTION


def check_can_write(out_dir: str, split: str) -> None:
    """ValueError when OUT holds a `split` JSON this writer did not write."""
    path = annotation_path(out_dir, split)
    if os.path.exists(path) and not _written_here(path):
        raise ValueError(
            f"{path}: exists and its 'info' does not name it a "
            f"{DESCRIPTION!r} file; refusing to overwrite it (move it or "
            f"write the shapes dataset to another folder); {_SYNTHETIC}"
        )


def estimated_bytes(num_images: int, image_size: int) -> int:
    """About what `num_images` PNGs of `image_size` take with their
    annotations, on the generous side (they measure ~1/6 of their raw
    bytes: 8 KB at 128 x 128)."""
    return num_images * (image_size * image_size * 3 // 4 + 1024)


# Each split -> the config key of its image count.
COUNT_KEYS = {"train": "data.shapes.num_train", "val": "data.shapes.num_val"}


def stale_splits(out_dir: str, settings) -> dict[str, int]:
    """Split -> image count of the splits not yet written under `out_dir`
    (or written for other settings); `settings` is config.data.shapes."""
    counts = {"train": settings.num_train, "val": settings.num_val}
    return {
        split: count
        for split, count in counts.items()
        if not split_is_current(
            out_dir, split, count, settings.image_size, settings.seed
        )
    }


def check_space(out_dir: str, counts: dict[str, int], image_size: int) -> None:
    """ValueError when writing `counts` (split -> images) of `image_size`
    under `out_dir` would not fit in the free space there, naming the
    config key (COUNT_KEYS) of the largest count."""
    if not counts:
        return
    needed = estimated_bytes(sum(counts.values()), image_size)
    existing = os.path.abspath(out_dir)
    while not os.path.exists(existing) and existing != os.path.dirname(
        existing
    ):
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if needed <= free:
        return
    split = max(counts, key=counts.get)
    raise ValueError(
        f"config.{COUNT_KEYS[split]}={counts[split]}: writing "
        f"{sum(counts.values())} shapes images of {image_size} x "
        f"{image_size} takes about {needed / 2**30:.1f} GiB, more than the "
        f"{free / 2**30:.1f} GiB free at {existing}; lower the count"
    )


def check_root(out_dir: str) -> None:
    """ValueError when OUT holds any COCO annotation file this writer did
    not write: a COCO folder named as the shapes set's data.root."""
    folder = os.path.join(out_dir, "annotations")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith("instances_") and not _written_here(path):
            raise ValueError(
                f"data.root={out_dir}: holds {name}, which the shapes "
                f"writer did not write; {_SYNTHETIC}"
            )


def check_image_size(size: int, key: str) -> None:
    """Raises one ValueError line naming config `key` unless `size` is at
    least MIN_IMAGE_SIZE."""
    if size < MIN_IMAGE_SIZE:
        raise ValueError(
            f"config.{key}={size!r}: must be >= {MIN_IMAGE_SIZE} (side of "
            "the square shapes images)"
        )


def _check_arguments(split: str, num_images: int, image_size: int) -> None:
    """ValueError naming the first bad argument of `write_split`."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {', '.join(SPLITS)}")
    if num_images < 0:
        raise ValueError(f"num_images={num_images} must be >= 0")
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(
            f"image_size={image_size} is below the minimum "
            f"{MIN_IMAGE_SIZE} pixels of the shapes images"
        )


def write_split(
    out_dir: str,
    split: str,
    num_images: int,
    image_size: int = 128,
    seed: int = 0,
) -> str:
    """Writes one split (PNGs, then the JSON); returns the JSON's path.

    Refuses (ValueError) to replace a JSON this writer did not write.
    """
    _check_arguments(split, num_images, image_size)
    check_can_write(out_dir, split)
    path = annotation_path(out_dir, split)
    image_dir = os.path.join(out_dir, split)
    os.makedirs(image_dir, exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # A JSON left from other parameters must not describe the new PNGs.
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    images, annotations = [], []
    for index in progress.bar(
        range(num_images),
        desc=f"Writing shapes {split}",
        unit="img",
        delay_s=progress.SLOW_LOOP_S,
    ):
        rng = np.random.default_rng([seed, SPLITS.index(split), index])
        pixels, instances = render_image(rng, image_size)
        image_id = index + 1
        file_name = f"{image_id:06d}.png"
        Image.fromarray(pixels).save(
            os.path.join(image_dir, file_name), compress_level=1
        )
        images.append(
            {
                "id": image_id,
                "file_name": file_name,
                "height": image_size,
                "width": image_size,
            }
        )
        for category, mask in instances:
            annotations.append(
                _annotation(mask, category, len(annotations) + 1, image_id)
            )
    coco = {
        "info": dataset_info(num_images, image_size, seed),
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": list(CATEGORIES),
    }
    # The JSON is written last and atomically: its presence marks the split
    # complete, and a reader never sees it half written.
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump(coco, f)
    os.replace(temporary, path)
    logging.info(
        "Wrote %d shapes images, %d instances: %s",
        num_images,
        len(annotations),
        path,
    )
    return path


def split_is_current(
    out_dir: str, split: str, num_images: int, image_size: int, seed: int
) -> bool:
    """Whether OUT holds `split` written with exactly these parameters."""
    path = annotation_path(out_dir, split)
    if not os.path.exists(path):
        return False
    try:
        with open(path) as f:
            info = json.load(f).get("info", {})
    except (OSError, ValueError):
        return False
    return info == dataset_info(num_images, image_size, seed)


def write_dataset(
    out_dir: str,
    num_train: int,
    num_val: int,
    image_size: int = 128,
    seed: int = 0,
) -> None:
    """Writes the train and val splits under `out_dir`."""
    for split in SPLITS:  # refuse before writing anything
        check_can_write(out_dir, split)
    for split, count in zip(SPLITS, (num_train, num_val), strict=True):
        write_split(out_dir, split, count, image_size, seed)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: writes the dataset described by the arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m detector.data.shapes_writer",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--out", default="data/shapes", help="output folder")
    parser.add_argument("--num_train", type=int, default=2000)
    parser.add_argument("--num_val", type=int, default=200)
    parser.add_argument(
        "--image_size",
        type=int,
        default=128,
        help=f"image side in pixels (>= {MIN_IMAGE_SIZE})",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.num_train, args.num_val) < 0:
        parser.error("--num_train and --num_val must be >= 0")
    if args.image_size < MIN_IMAGE_SIZE:
        parser.error(
            f"--image_size={args.image_size} is below the minimum "
            f"{MIN_IMAGE_SIZE}"
        )
    logging.set_verbosity(logging.INFO)
    try:
        write_dataset(
            args.out, args.num_train, args.num_val, args.image_size, args.seed
        )
    except ValueError as e:
        parser.error(str(e))


if __name__ == "__main__":
    main()
