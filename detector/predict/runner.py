"""Image files -> batches -> predictions.json and one overlay PNG each.

    predictor = Predictor(resize, categories, run, mask_paste)
    summary = predict_files(predictor, ["photos/"], pathlib.Path("out"))

Both forms of predict.py end here: `run` is the exported artifact
(`artifact.run`) or the in-process jitted model (detector/export/). Files
are read with `images.read_image` (any size and mode, EXIF orientation
applied), resized in float by the rule eval resizes by (`images.fitted_size`,
`images.place`: no rounding to uint8), and run `batch_size` at a time.
A file that cannot be read is one line on stderr and is skipped; the rest
are written.

predictions.json maps each file (as named on the command line, or
folder/name) to its detections in COCO results format without image_id:
{"bbox": [x, y, w, h] in original pixels, "score", "category_id",
"segmentation": RLE at the original size}. The RLE is compressed (counts a
string) where pycocotools is installed, else COCO's uncompressed form
(counts a list); pycocotools and the COCO tools read both.
"""

import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from detector.imaging import images, masks, rle
from detector.predict import artifact, draw, output_files

PREDICTIONS_FILE = "predictions.json"
# Detections drawn in the overlays (all are in predictions.json).
DRAW_SCORE_THRESHOLD = 0.5


@dataclasses.dataclass(frozen=True)
class Predictor:
    """What predicts: resize rule and canvas, categories, a batch function.

    `run(images f32[b, H, W, 3], image_sizes i32[b, 2], orig_sizes
    i32[b, 2])` returns the outputs of `detector.predict.artifact.OUTPUTS`
    as numpy arrays; `mask_paste` names the rule of `masks.MASK_PASTERS`
    (the config's eval.mask_paste). The canvas is `resize.image_size`.
    """

    resize: images.Resize
    categories: list[dict]
    run: Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]
    mask_paste: str = "centres"

    @property
    def image_size(self) -> tuple[int, int]:
        return self.resize.image_size


def list_images(args: list[str]) -> list[pathlib.Path]:
    """Files named, and every file of each folder named (sorted, not hidden),
    each once. A link in a folder whose target is missing or loops is
    listed too, so that it is reported as skipped rather than dropped.

    Raises:
      ValueError: nothing named, or a path that does not exist.
    """
    if not args:
        raise ValueError("no images given: name image files or folders")
    found = []
    for arg in args:
        path = pathlib.Path(arg)
        if path.is_dir():
            found += sorted(
                p
                for p in path.iterdir()
                if (p.is_file() or (p.is_symlink() and not p.exists()))
                and not p.name.startswith(".")
            )
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"{arg}: no such file or folder")
    return list(dict.fromkeys(found))


def image_detections(
    outputs: dict[str, np.ndarray],
    i: int,
    height: int,
    width: int,
    mask_paste: str = "centres",
) -> tuple[list[dict], masks.BoxMasks]:
    """(COCO results, pasted masks) of row i of a batch, masks pasted by the
    rule `mask_paste` of `masks.MASK_PASTERS`."""
    count = int(outputs["num_valid"][i])
    boxes = np.asarray(outputs["boxes"][i][:count], np.float64)
    pasted = masks.MASK_PASTERS[mask_paste](
        outputs["masks"][i][:count], boxes, height, width
    )
    segmentations = rle.encode(pasted)
    results = []
    for d in range(count):
        x1, y1, x2, y2 = (float(v) for v in boxes[d])
        results.append(
            {
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "score": float(outputs["scores"][i][d]),
                "category_id": int(outputs["category_ids"][i][d]),
                "segmentation": segmentations[d],
            }
        )
    return results, pasted


def _readable(
    paths: list[pathlib.Path],
) -> Iterator[tuple[pathlib.Path, np.ndarray]]:
    for path in paths:
        try:
            yield path, images.read_image(path)
        except images.ImageReadError as e:
            print(f"skipped: {e}", file=sys.stderr)


def _batches(
    paths: list[pathlib.Path], size: int
) -> Iterator[list[tuple[pathlib.Path, np.ndarray]]]:
    batch = []
    for item in _readable(paths):
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _overlay_name(path: pathlib.Path, used: set[str]) -> str:
    name, k = f"{path.stem}.png", 1
    while name in used:
        name, k = f"{path.stem}_{k}.png", k + 1
    used.add(name)
    return name


def predict_files(
    predictor: Predictor,
    args: list[str],
    out: pathlib.Path,
    *,
    batch_size: int = 8,
) -> dict:
    """Predicts every image of `args`; writes out/predictions.json and
    out/<stem>.png. Returns {"images", "skipped", "predict_seconds"}.

    Raises:
      ValueError: no images, a missing path or batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"--batch_size={batch_size}: must be >= 1")
    paths = list_images(args)
    output_files.check_out(out, paths)
    out.mkdir(parents=True, exist_ok=True)
    names = {c["id"]: c["name"] for c in predictor.categories}
    predictions, used, seconds = {}, set(), 0.0
    for batch in _batches(paths, batch_size):
        sizes = np.asarray([im.shape[:2] for _, im in batch], np.int32)
        canvas = predictor.image_size
        resized = np.asarray(
            [
                images.fitted_size(im.shape[:2], predictor.resize, canvas)
                for _, im in batch
            ],
            np.int32,
        )
        inputs = np.stack(
            [
                images.place(im, tuple(size), canvas)
                for (_, im), size in zip(batch, resized, strict=True)
            ]
        )
        started = time.perf_counter()
        outputs = predictor.run(inputs, resized, sizes)
        seconds += time.perf_counter() - started
        for i, (path, image) in enumerate(batch):
            results, pasted = image_detections(
                outputs, i, *image.shape[:2], predictor.mask_paste
            )
            predictions[str(path)] = results
            shown = np.asarray(
                [r["score"] >= DRAW_SCORE_THRESHOLD for r in results], bool
            )
            draw.save_overlay(
                out / _overlay_name(path, used),
                image,
                [r for r, s in zip(results, shown, strict=True) if s],
                pasted.full(shown),
                names,
            )
    output_files.write(out / PREDICTIONS_FILE, json.dumps(predictions).encode())
    return {
        "images": len(predictions),
        "skipped": len(paths) - len(predictions),
        "predict_seconds": seconds,
    }


def artifact_predictor(loaded: artifact.Artifact) -> Predictor:
    """A Predictor that calls an exported artifact (`artifact.load`)."""
    return Predictor(
        loaded.resize,
        loaded.meta["categories"],
        lambda batch, resized, sizes: artifact.run(
            loaded, batch, resized, sizes
        ),
        loaded.meta["mask_paste"],
    )
