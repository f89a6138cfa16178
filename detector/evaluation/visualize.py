"""Draws predicted boxes, masks and labels over input images (one PNG per
eval), by predict.py's drawing rule (`imaging.overlay`)."""

import pathlib

import matplotlib
import ml_collections
import numpy as np

from detector.imaging import masks as mask_paste
from detector.imaging import overlay

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


class LowestIds:
    """Keeps the rows of the `count` lowest image ids of the batches seen,
    each a one-row (batch, outputs) pair for `draw_predictions`."""

    def __init__(self, count: int):
        self._count = count
        self._rows: list[tuple[int, dict, dict]] = []

    def add(self, batch: dict, outputs: dict) -> None:
        """Considers the valid rows of a batch and its predictions."""
        for i in np.flatnonzero(batch["image_valid"]):
            image_id = int(batch["image_id"][i])
            full = len(self._rows) >= self._count
            if full and (not self._rows or image_id >= self._rows[-1][0]):
                continue
            row = (
                image_id,
                {k: np.array(v[i : i + 1]) for k, v in batch.items()},
                {k: np.array(v[i : i + 1]) for k, v in outputs.items()},
            )
            self._rows.append(row)
            self._rows.sort(key=lambda kept: kept[0])
            del self._rows[self._count :]

    def rows(self) -> list[tuple[dict, dict]]:
        """The kept (batch, outputs) rows, by image id."""
        return [(batch, outputs) for _, batch, outputs in self._rows]


def _input_image(
    batch: dict, i: int, config: ml_collections.ConfigDict
) -> np.ndarray:
    """The i-th model input as u8[h, w, 3], un-normalised and cut to its
    unpadded region."""
    image = batch["image"][i] * np.asarray(config.data.pixel_std) + np.asarray(
        config.data.pixel_mean
    )
    height, width = (int(v) for v in batch["image_size"][i])
    return np.clip(np.round(image[:height, :width]), 0, 255).astype(np.uint8)


def drawn_image(
    image: np.ndarray,
    outputs: dict,
    i: int,
    class_names: list[str],
    score_threshold: float,
):
    """Row i's detections of `score_threshold` and up over `image`
    (u8[h, w, 3]), drawn by `imaging.overlay` (predict.py's rule: labels
    never cover each other or leave the image); a PIL image."""
    count = int(outputs["num_detections"][i])
    keep = [
        d for d in range(count) if outputs["scores"][i, d] >= score_threshold
    ]
    boxes = np.asarray(outputs["boxes"][i, keep], np.float64)
    masks = mask_paste.paste_masks(
        outputs["masks"][i, keep], boxes, image.shape[0], image.shape[1]
    )
    detections = [
        {
            "bbox": [x1, y1, x2 - x1, y2 - y1],
            "category_id": int(outputs["classes"][i, d]),
            "score": float(outputs["scores"][i, d]),
        }
        for d, (x1, y1, x2, y2) in zip(keep, boxes.tolist(), strict=True)
    ]
    names = {c + 1: name for c, name in enumerate(class_names)}
    return overlay.overlay(image, detections, np.asarray(masks, bool), names)


def draw_predictions(
    drawn: list[tuple[dict, dict]],
    config: ml_collections.ConfigDict,
    path: pathlib.Path,
    *,
    class_names: list[str],
    score_threshold: float = 0.5,
) -> None:
    """Draws up to config.eval.num_visualized images from (batch, outputs)."""
    items = [
        (batch, outputs, i)
        for batch, outputs in drawn
        for i in range(len(batch["image"]))
        if batch["image_valid"][i]
    ]
    items = items[: config.eval.num_visualized]
    if not items:
        return
    fig, axes = plt.subplots(
        1, len(items), figsize=(4 * len(items), 4), squeeze=False
    )
    for ax, (batch, outputs, i) in zip(axes[0], items, strict=True):
        ax.imshow(
            drawn_image(
                _input_image(batch, i, config),
                outputs,
                i,
                class_names,
                score_threshold,
            )
        )
        ax.set_axis_off()
    fig.suptitle(f"predictions (score >= {score_threshold})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
