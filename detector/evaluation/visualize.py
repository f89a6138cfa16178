"""Draws predicted boxes, masks and labels over input images (one PNG per
eval), by predict.py's drawing rule (`imaging.overlay`)."""

import pathlib

import ml_collections
import numpy as np

from detector.imaging import detections, overlay
from detector.utils import pyplot


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


def _input_image(batch: dict, i: int) -> np.ndarray:
    """The i-th model input as u8[h, w, 3], cut to its unpadded region."""
    height, width = (int(v) for v in batch["image_size"][i])
    image = batch["image"][i][:height, :width]
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def drawn_image(
    image: np.ndarray,
    outputs: dict,
    i: int,
    names: dict[int, str],
    score_threshold: float,
    orig_size: tuple[int, int] | None = None,
):
    """Row i's detections (`imaging.detections.OUTPUTS`, boxes in pixels of
    an `orig_size` image: None, `image`'s own) of `score_threshold` and up
    over `image` (u8[h, w, 3]), formatted and drawn as predict.py draws
    them (`detections.image_results`, `imaging.overlay`); a PIL image.
    `names` maps category ids to names."""
    height, width = image.shape[:2]
    factor = np.asarray([width, height] * 2, np.float64) / np.asarray(
        [*(orig_size or (height, width))[::-1]] * 2, np.float64
    )
    scaled = {**outputs, "boxes": np.asarray(outputs["boxes"]) * factor}
    found, pasted = detections.image_results(scaled, i, height, width)
    shown = np.asarray([r["score"] >= score_threshold for r in found], bool)
    drawn = [r for r, s in zip(found, shown, strict=True) if s]
    return overlay.overlay(image, drawn, pasted.full(shown), names)


def draw_predictions(
    drawn: list[tuple[dict, dict]],
    config: ml_collections.ConfigDict,
    path: pathlib.Path,
    *,
    names: dict[int, str],
    score_threshold: float = 0.5,
) -> None:
    """Draws up to config.eval.num_visualized images from (batch, outputs),
    over the model's input; `names` maps category ids to names."""
    items = [
        (batch, outputs, i)
        for batch, outputs in drawn
        for i in range(len(batch["image"]))
        if batch["image_valid"][i]
    ]
    items = items[: config.eval.num_visualized]
    if not items:
        return
    plt = pyplot.pyplot()
    fig, axes = plt.subplots(
        1, len(items), figsize=(4 * len(items), 4), squeeze=False
    )
    for ax, (batch, outputs, i) in zip(axes[0], items, strict=True):
        ax.imshow(
            drawn_image(
                _input_image(batch, i),
                outputs,
                i,
                names,
                score_threshold,
                tuple(int(v) for v in batch["orig_size"][i]),
            )
        )
        ax.set_axis_off()
    fig.suptitle(f"predictions (score >= {score_threshold})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
