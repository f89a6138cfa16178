"""A COCO-format folder of shapes images in both orientations: landscape
(96 x 128) and portrait (128 x 96) crops of the shapes drawings."""

import pathlib

import ml_collections
import numpy as np

from detector.data import shapes_writer
from tests.detector.data import helpers as data_helpers

SIDE, SHORT = 128, 96


def _cropped(rng: np.random.Generator, portrait: bool):
    """One drawing cut to its orientation, with its non-empty instances."""
    pixels, instances = shapes_writer.render_image(rng, SIDE)
    window = (slice(None), slice(0, SHORT)) if portrait else (slice(0, SHORT),)
    kept = [(c, mask[window]) for c, mask in instances if mask[window].any()]
    return np.ascontiguousarray(pixels[window]), kept


def write(
    root: str | pathlib.Path,
    split: str,
    count: int,
    seed: int = 0,
    *,
    portrait_only: bool = False,
) -> list[bool]:
    """Writes `count` images, every third one portrait (or all of them);
    returns which are."""
    portrait = [portrait_only or index % 3 == 1 for index in range(count)]
    images, annotations = [], []
    for index, tall in enumerate(portrait):
        pixels, instances = _cropped(np.random.default_rng([seed, index]), tall)
        images.append(pixels)
        for category, mask in instances:
            annotations.append(
                data_helpers.annotation(
                    mask, category, len(annotations) + 1, index + 1
                )
            )
    data_helpers.write_folder(str(root), split, images, annotations)
    return portrait


def grouped_config(root: str | pathlib.Path) -> ml_collections.ConfigDict:
    """The data tests' small config over `root`, shortest-edge resized onto
    a 64 x 128 landscape and a 128 x 64 portrait canvas."""
    config = data_helpers.small_config(str(root))
    data = config.data
    data.resize = "shortest_edge"
    data.min_size = (48, 64)
    data.max_size = 96
    data.image_size = (64, 128)
    data.group_orientations = True
    return config
