"""Checks of a COCO instances JSON, shared by the COCO folder and TFDS.

Records the loader cannot read raise one-line `ValueError`s naming the file
and the record (`check_records`); annotations that cannot be used are
skipped and logged (`SkipLog`, `segmentation_problem`, `rle_problem`); the
ground truth COCOeval reads gets positive unique annotation ids
(`renumber_if_needed`) and COCO's `iscrowd` / `area` defaults where they
lack (`fill_eval_defaults`).
"""

from absl import logging
from pycocotools import mask as mask_utils

# Keys of each record of an instances JSON that the loader reads.
_REQUIRED_KEYS = {
    "images": ("id", "file_name", "height", "width"),
    "annotations": ("image_id", "bbox", "category_id"),
    "categories": ("id",),
}
# (records, key) whose values must be integers (ids COCOeval matches on).
_INTEGER_KEYS = (
    ("images", "id"),
    ("annotations", "image_id"),
    ("categories", "id"),
)
# Individually logged skipped annotations per file; the rest are counted.
_MAX_LOGGED_SKIPS = 10


def renumber_if_needed(annotations: list[dict], source: str) -> None:
    """COCOeval needs positive, unique annotation ids; renumbers otherwise."""
    ids = [a.get("id") for a in annotations]
    if all(isinstance(i, int) and i > 0 for i in ids) and len(set(ids)) == len(
        ids
    ):
        return
    logging.warning(
        "%s: annotation ids are not positive and unique; "
        "renumbering them 1..%d for evaluation",
        source,
        len(ids),
    )
    for number, annotation in enumerate(annotations, start=1):
        annotation["id"] = number


class SkipLog:
    """Logs skipped annotations: the first few one by one, then a summary."""

    def __init__(self, source: str):
        self.source = source
        self.counts: dict[str, int] = {}

    def skip(self, annotation: dict, reason: str) -> None:
        """Logs one skip; `reason` is 'kind' or 'kind: detail'."""
        kind = reason.split(":")[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if sum(self.counts.values()) <= _MAX_LOGGED_SKIPS:
            logging.warning(
                "%s: skipping annotation id=%s of image %s: %s",
                self.source,
                annotation.get("id"),
                annotation.get("image_id"),
                reason,
            )

    def summarize(self) -> None:
        if self.counts:
            reasons = ", ".join(f"{n} {r}" for r, n in self.counts.items())
            logging.warning(
                "%s: skipped %d annotations (%s)",
                self.source,
                sum(self.counts.values()),
                reasons,
            )


def rle_problem(segmentation, height: int, width: int) -> str | None:
    """Why an RLE segmentation does not fit its image, or None when it does.

    Anything other than an RLE dict passes.
    """
    if not isinstance(segmentation, dict):
        return None
    size = segmentation.get("size")
    if size is None:
        return "RLE segmentation without 'size'"
    if not isinstance(size, (list, tuple)) or list(size) != [height, width]:
        return (
            f"RLE size differs from the image: {size!r} vs "
            f"[{height}, {width}] (height, width)"
        )
    return None


def segmentation_problem(segmentation, height: int, width: int) -> str | None:
    """Why a segmentation cannot give a mask, or None when it can."""
    if isinstance(segmentation, list):
        if not segmentation or not all(
            isinstance(p, list) and len(p) >= 6 for p in segmentation
        ):
            return "empty segmentation (needs a polygon of 3+ points)"
        return None
    if isinstance(segmentation, dict) and segmentation.get("counts"):
        return rle_problem(segmentation, height, width)
    return "empty segmentation"


def to_rle(segmentation, height: int, width: int) -> dict:
    """A usable polygon / RLE segmentation as one RLE of its image."""
    if isinstance(segmentation, list):  # polygons
        return mask_utils.merge(
            mask_utils.frPyObjects(segmentation, height, width)
        )
    if isinstance(segmentation["counts"], list):  # uncompressed RLE
        return mask_utils.frPyObjects(segmentation, height, width)
    return segmentation


def _first_repeat(values: list) -> tuple[int, int] | None:
    """(first index, repeating index) of the first repeated value, or None."""
    first: dict = {}
    for index, value in enumerate(values):
        if value in first:
            return first[value], index
        first[value] = index
    return None


def check_records(path: str, dataset: dict) -> None:
    """ValueError naming the first record the loader cannot read.

    A record that is no object or lacks a key the loader reads, an image or
    category id or an annotation's image_id that is not an integer, and an
    image or category id given twice.
    """
    for key, required in _REQUIRED_KEYS.items():
        for index, record in enumerate(dataset[key]):
            if not isinstance(record, dict):
                raise ValueError(f"{path}: {key}[{index}] is not an object")
            missing = [repr(k) for k in required if k not in record]
            if missing:
                raise ValueError(
                    f"{path}: {key}[{index}] "
                    f"(id={record.get('id')!r}) lacks "
                    f"{', '.join(missing)}"
                )
    for key, field in _INTEGER_KEYS:
        for index, record in enumerate(dataset[key]):
            value = record[field]
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(
                    f"{path}: {key}[{index}] {field} {value!r} is not an "
                    "integer"
                )
    repeat = _first_repeat([c["id"] for c in dataset["categories"]])
    if repeat:
        cid = dataset["categories"][repeat[1]]["id"]
        raise ValueError(f"{path}: categories[{repeat[1]}] repeats id {cid}")
    images = dataset["images"]
    repeat = _first_repeat([im["id"] for im in images])
    if repeat:
        first, again = (images[i] for i in repeat)
        raise ValueError(
            f"{path}: images[{repeat[1]}] repeats id {again['id']} of "
            f"images[{repeat[0]}] (file_name {first['file_name']!r} and "
            f"{again['file_name']!r}); image ids must be unique"
        )


def _area(annotation: dict, image: dict) -> float:
    """Pixel area of the segmentation, or w * h of the box without one."""
    height, width = image["height"], image["width"]
    segmentation = annotation.get("segmentation")
    if segmentation_problem(segmentation, height, width) is None:
        return float(mask_utils.area(to_rle(segmentation, height, width)))
    return float(annotation["bbox"][2] * annotation["bbox"][3])


def fill_eval_defaults(
    annotations: list[dict], images: dict[int, dict], source: str
) -> None:
    """Sets the 'iscrowd' (0) and 'area' COCOeval needs where they lack."""
    crowd = area = 0
    for annotation in annotations:
        if "iscrowd" not in annotation:
            annotation["iscrowd"] = 0
            crowd += 1
        if "area" not in annotation:
            annotation["area"] = _area(
                annotation, images[annotation["image_id"]]
            )
            area += 1
    if crowd or area:
        logging.warning(
            "%s: filled defaults for evaluation: iscrowd=0 on %d "
            "annotations, area (segmentation pixels, else box w*h) on %d",
            source,
            crowd,
            area,
        )
