"""Draws predicted boxes and masks over input images (one PNG per eval)."""

import pathlib

import matplotlib
import ml_collections
import numpy as np

from detector.imaging import masks as mask_paste

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_COLOURS = plt.get_cmap("tab10").colors


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
    """The i-th model input, un-normalised and cut to its unpadded region."""
    image = batch["image"][i] * np.asarray(config.data.pixel_std) + np.asarray(
        config.data.pixel_mean
    )
    height, width = (int(v) for v in batch["image_size"][i])
    return np.clip(image[:height, :width] / 255.0, 0.0, 1.0)


def _draw_one(
    ax,
    image: np.ndarray,
    outputs: dict,
    i: int,
    class_names: list[str],
    score_threshold: float,
) -> None:
    ax.imshow(image)
    count = int(outputs["num_detections"][i])
    keep = [
        d for d in range(count) if outputs["scores"][i, d] >= score_threshold
    ]
    boxes = outputs["boxes"][i, keep]
    masks = mask_paste.paste_masks(
        outputs["masks"][i, keep], boxes, image.shape[0], image.shape[1]
    )
    overlay = np.zeros(image.shape[:2] + (4,))
    for j, d in enumerate(keep):
        colour = _COLOURS[int(outputs["classes"][i, d]) % len(_COLOURS)]
        overlay[masks[j]] = (*colour, 0.45)
        x1, y1, x2, y2 = boxes[j]
        ax.add_patch(
            plt.Rectangle(
                (x1, y1),
                x2 - x1,
                y2 - y1,
                fill=False,
                edgecolor=colour,
                linewidth=1.2,
            )
        )
        label = class_names[int(outputs["classes"][i, d]) - 1]
        ax.text(
            x1,
            y1,
            f"{label}: {outputs['scores'][i, d]:.2f}",
            color="white",
            fontsize=6,
            va="bottom",
            bbox={
                "facecolor": colour,
                "alpha": 0.7,
                "pad": 0.5,
                "linewidth": 0,
            },
        )
    ax.imshow(overlay)
    ax.set_axis_off()


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
        _draw_one(
            ax,
            _input_image(batch, i, config),
            outputs,
            i,
            class_names,
            score_threshold,
        )
    fig.suptitle(f"predictions (score >= {score_threshold})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
