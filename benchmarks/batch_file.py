"""Training batches in one .npz file, readable without TensorFlow.

    batch_file.save("batches.npz", batches, config.data)  # where tf.data runs
    batches = batch_file.load("batches.npz")             # anywhere (numpy)
    batch_file.check_shapes(batches, config, "batches.npz")

Saves the model inputs (`detector.distributed.sharding.MODEL_INPUTS`) of a few
batches from the real input pipeline, so a step can be timed on a machine
without TensorFlow (benchmarks/step_bench.py --save_batches / --batches).
Each entry is stacked over the batches: [num_batches, B, ...].

Images are stored as 8-bit pixels (the pipeline's normalised floats mapped
back through `data.pixel_mean` / `pixel_std` and rounded), with the mean and
std in the file; `load` normalises them again. A loaded image is within half
a grey level of the pipeline's (|error| <= 0.5 / std, ~0.009), and the file
is `np.savez_compressed`: a batch of 8 COCO-sized 1024 x 1024 shapes images
with its masks is a few MiB. Batches on different canvases (orientation
canvases) are stored at the top left of the largest, with each batch's
canvas in `canvas` [num_batches, 2], and cut back on loading.
"""

import pathlib
from collections.abc import Sequence

import jax
import ml_collections
import numpy as np

from detector.config import data as data_config
from detector.distributed import sharding
from detector.imaging import canvases

FORMAT = 1
_PIXELS = "image_u8"
_CANVAS = "canvas"  # only when the batches' canvases differ


# Model inputs a batch file may lack (made up on loading).
_OPTIONAL = ("image", "image_size")


def save(
    path: str | pathlib.Path,
    batches: Sequence[dict[str, np.ndarray]],
    data: ml_collections.ConfigDict,
) -> pathlib.Path:
    """Writes the model inputs of `batches` to `path` (.npz); returns it."""
    if not batches:
        raise ValueError(f"{path}: no batches to save")
    mean = np.asarray(data.pixel_mean, np.float32)
    std = np.asarray(data.pixel_std, np.float32)
    arrays = {
        key: np.stack([b[key] for b in batches])
        for key in sharding.MODEL_INPUTS
        if key != "image"
    }
    shapes = np.asarray([b["image"].shape[1:3] for b in batches], np.int32)
    bound = shapes.max(axis=0)
    if (shapes != bound).any():
        arrays[_CANVAS] = shapes
    images = np.zeros(
        (len(batches), len(batches[0]["image"]), *bound, 3), np.float32
    )
    for index, batch in enumerate(batches):
        height, width = batch["image"].shape[1:3]
        images[index, :, :height, :width] = batch["image"] * std + mean
    arrays[_PIXELS] = np.clip(np.rint(images), 0, 255).astype(np.uint8)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # savez would append '.npz' to other names
        np.savez_compressed(
            f, format=FORMAT, pixel_mean=mean, pixel_std=std, **arrays
        )
    return path


def load(path: str | pathlib.Path) -> list[dict[str, np.ndarray]]:
    """The batches saved in `path`: one dict of model inputs per batch."""
    try:
        npz = np.load(path)
    except ValueError as e:  # not an npz (or a pickled one)
        raise ValueError(f"{path}: not a batch file ({e})") from None
    with npz:
        missing = [
            k
            for k in ("format", "pixel_mean", "pixel_std", _PIXELS)
            + tuple(k for k in sharding.MODEL_INPUTS if k not in _OPTIONAL)
            if k not in npz.files
        ]
        if missing:
            raise ValueError(
                f"{path}: not a batch file of this project "
                f"(missing {', '.join(missing)})"
            )
        if int(npz["format"]) != FORMAT:
            raise ValueError(
                f"{path}: batch file format {int(npz['format'])}"
                f", this version reads {FORMAT}"
            )
        images = (npz[_PIXELS].astype(np.float32) - npz["pixel_mean"]) / npz[
            "pixel_std"
        ]
        arrays = {
            k: npz[k]
            for k in sharding.MODEL_INPUTS
            if k != "image" and k in npz.files
        }
        shapes = npz[_CANVAS] if _CANVAS in npz.files else None
    if shapes is not None:  # each batch cut back to its own canvas
        images = [
            image[:, :height, :width]
            for image, (height, width) in zip(images, shapes, strict=True)
        ]
    arrays["image"] = images
    # Files saved before images carried their sizes: the whole canvas.
    arrays.setdefault(
        "image_size",
        np.stack(
            [
                np.broadcast_to(
                    np.asarray(image.shape[1:3], np.int32), (len(image), 2)
                )
                for image in images
            ]
        ),
    )
    return [
        {k: arrays[k][i] for k in sharding.MODEL_INPUTS}
        for i in range(len(images))
    ]


def expected_shapes(
    config: ml_collections.ConfigDict,
    canvas: tuple[int, int] | None = None,
) -> dict[str, tuple[int, ...]]:
    """Per-batch shapes of the model inputs the pipeline makes for `config`
    on `canvas` (default its first training one: `canvases.training`)."""
    data = config.data
    b, m = config.train.batch_size, data.max_instances
    canvas = canvas or canvases.training(data)[0]
    masks = data_config.gt_masks_shape(
        data_config.mask_layout(config), data, canvas
    )
    return {
        "image": (b, *canvas, 3),
        "image_size": (b, 2),
        "boxes": (b, m, 4),
        "classes": (b, m),
        "valid": (b, m),
        "masks": (b, *masks),
        "mask_valid": (b, m),
    }


# The pipeline's dtypes of the model inputs (detector/data/pipeline.py).
DTYPES = {
    "image": np.float32,
    "image_size": np.int32,
    "boxes": np.float32,
    "classes": np.int32,
    "valid": np.bool_,
    "masks": np.uint8,
    "mask_valid": np.bool_,
}


def abstract_batch(
    config: ml_collections.ConfigDict,
    canvas: tuple[int, int] | None = None,
) -> dict[str, jax.ShapeDtypeStruct]:
    """The model inputs of a batch of `config` on `canvas`, as shapes."""
    return {
        k: jax.ShapeDtypeStruct(shape, DTYPES[k])
        for k, shape in expected_shapes(config, canvas).items()
    }


def check_shapes(
    batches: Sequence[dict[str, np.ndarray]],
    config: ml_collections.ConfigDict,
    path: str | pathlib.Path,
) -> None:
    """ValueError naming the file and entry if a shape differs from config's
    (each batch on one of the config's canvases)."""
    choices = canvases.training(config.data)
    for index, batch in enumerate(batches):
        canvas = tuple(batch["image"].shape[1:3])
        if canvas not in choices:
            raise ValueError(
                f"{path}: batch {index} is on a {canvas[0]} x {canvas[1]} "
                f"canvas, the config's are {list(choices)} (data.image_size, "
                "data.train_image_size, data.group_orientations); save the "
                "batches with the same config"
            )
    first = tuple(batches[0]["image"].shape[1:3])
    for key, want in expected_shapes(config, first).items():
        if key == "image":
            continue
        got = batches[0][key].shape
        if got != want:
            raise ValueError(
                f"{path}: {key} has shape {got}, the config's pipeline makes "
                f"{want} (train.batch_size, data.image_size, "
                f"data.max_instances, data.gt_mask_size, "
                f"model.loss.mask_target); save the batches "
                f"with the same config"
            )
