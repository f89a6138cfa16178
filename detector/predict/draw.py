"""One overlay PNG per image, drawn at the photo's own size
(`imaging.overlay`, docs/export-and-predict.md)."""

import io
import pathlib

import numpy as np

from detector.imaging import overlay
from detector.predict import output_files


def save_overlay(
    path: pathlib.Path,
    image: np.ndarray,
    detections: list[dict],
    masks: np.ndarray,
    names: dict[int, str],
) -> None:
    """Writes `overlay.overlay(...)` as a PNG at `path`, replacing it whole
    (a symlink there is replaced, not written through)."""
    png = io.BytesIO()
    overlay.overlay(image, detections, masks, names).save(png, format="PNG")
    output_files.write(path, png.getvalue())
