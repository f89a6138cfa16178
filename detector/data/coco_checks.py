"""Checks of a COCO instances JSON, shared by the COCO folder and TFDS: one
error line per unreadable record or bad field, skips logged, COCOeval's
defaults filled (docs/bad-input.md)."""

import math
import os
from collections.abc import Callable

from absl import logging
from pycocotools import mask as mask_utils

from detector.data import category_ids

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

# The largest id: ids travel as int64 through the pipeline and COCOeval,
# whose matching also fails on negative image ids.
MAX_ID = 2**63 - 1


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _segmentation(value: object) -> bool:
    """Polygons (lists of numbers) or an RLE object; emptiness and odd
    lengths are skip reasons (`segmentation_problem`), not type errors."""
    if isinstance(value, list):
        return all(isinstance(p, list) and all(map(_number, p)) for p in value)
    return isinstance(value, dict)


# (records, key) -> (test, what the value must be). An absent key passes
# here (the required ones are _REQUIRED_KEYS'); a present value that fails
# is one line naming the file, the record's id and the key.
FIELDS: dict[tuple[str, str], tuple[Callable[[object], bool], str]] = {
    ("images", "file_name"): (
        lambda v: isinstance(v, str) and bool(v),
        "a file name (a non-empty string)",
    ),
    ("images", "height"): (
        lambda v: _integer(v) and v > 0,
        "a positive integer",
    ),
    ("images", "width"): (
        lambda v: _integer(v) and v > 0,
        "a positive integer",
    ),
    ("annotations", "iscrowd"): (
        lambda v: _integer(v) and v in (0, 1),
        "0 or 1 (the integer)",
    ),
    ("annotations", "area"): (_number, "a finite number"),
    ("annotations", "segmentation"): (
        _segmentation,
        "polygons (lists of numbers) or an RLE object",
    ),
}
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
    if not isinstance(size, (list, tuple)) or not all(map(_integer, size)):
        return (
            f"RLE size must be two positive integers (height, width): {size!r}"
        )
    if list(size) != [height, width]:
        return (
            f"RLE size differs from the image: {size!r} vs "
            f"[{height}, {width}] (height, width)"
        )
    return _counts_problem(segmentation.get("counts"), height, width)


def _counts_problem(counts: object, height: int, width: int) -> str | None:
    """Why RLE `counts` (COCO's compressed string, or a list of runs) do not
    cover height x width pixels, or None: pycocotools would otherwise fail
    late, after the model compiled, without naming the annotation."""
    if isinstance(counts, str):
        runs = _compressed_runs(counts)
        if isinstance(runs, str):
            return (
                f"invalid RLE counts: {_shown(counts)} is not a compressed "
                f"RLE string ({runs})"
            )
    elif isinstance(counts, list):
        runs = counts
    else:
        return (
            "invalid RLE counts: a string or a list of integers, not "
            f"{_shown(counts)}"
        )
    if not all(_integer(r) and r >= 0 for r in runs):
        return (
            "invalid RLE counts: a list of non-negative integers, not "
            f"{_shown(counts)}"
        )
    if sum(runs) != height * width:
        return (
            f"invalid RLE counts: the runs cover {sum(runs)} pixels, not "
            f"{height} * {width} = {height * width}"
        )
    return None


def _compressed_runs(counts: str) -> list[int] | str:
    """The runs of COCO's compressed RLE string (pycocotools' rleFrString:
    5 bits per character from '0', a continuation bit, a sign bit in the
    last character, runs after the second relative to the one two back),
    or why it is not one."""
    runs: list[int] = []
    position = 0
    while position < len(counts):
        value = shift = 0
        more = True
        while more:
            if position == len(counts):
                return "cut inside a run"
            char = counts[position]
            code = ord(char) - 48
            if not 0 <= code <= 63:
                return f"{char!r} at {position} is outside '0'..'o'"
            value |= (code & 0x1F) << shift
            more = bool(code & 0x20)
            position += 1
            shift += 5
            if not more and code & 0x10:
                value |= -1 << shift
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def _part_problem(part: list) -> str | None:
    """Why one part of a polygon segmentation gives no region, or None."""
    if len(part) % 2:
        return f"{len(part)} coordinates, not x, y pairs"
    if len(part) < 6:
        return f"{len(part) // 2} points, not 3 or more"
    return None


def polygon_parts(segmentation: list) -> tuple[list, list[tuple[int, str]]]:
    """(the usable parts of a polygon segmentation, [(1-based position,
    why) of each part dropped]): as pycocotools and detectron2 read a
    multi-part polygon, a degenerate part (odd length, under 3 points)
    drops alone, not the whole instance."""
    kept, dropped = [], []
    for position, part in enumerate(segmentation, 1):
        why = _part_problem(part)
        if why is None:
            kept.append(part)
        else:
            dropped.append((position, why))
    return kept, dropped


def log_dropped_parts(
    source: str, annotation: dict, dropped: list[tuple[int, str]]
) -> None:
    """One log line per polygon part `polygon_parts` dropped."""
    total = len(annotation["segmentation"])
    for position, why in dropped:
        logging.warning(
            "%s: annotation id=%s of image %s: polygon part %d of %d dropped "
            "(%s); the other parts are kept",
            source,
            annotation.get("id"),
            annotation.get("image_id"),
            position,
            total,
            why,
        )


def segmentation_problem(segmentation, height: int, width: int) -> str | None:
    """Why a segmentation cannot give a mask, or None when it can (a
    polygon where one part is usable: `polygon_parts`)."""
    if isinstance(segmentation, list):
        if polygon_parts(segmentation)[0]:
            return None
        if not segmentation or any(len(p) < 6 for p in segmentation):
            return "empty segmentation (needs a polygon of 3+ points)"
        odd = next(p for p in segmentation if len(p) % 2)
        return f"odd-length polygon: {len(odd)} coordinates, not x, y pairs"
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


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_records(path: str, dataset: dict) -> None:
    """ValueError naming the first record the loader cannot read.

    A record that is no object or lacks a key the loader reads, an image or
    category id or an annotation's image_id that is not an integer, and an
    image or category id given twice, and a value that fails its test in
    `FIELDS`.
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
            if not 0 <= value <= MAX_ID:
                where = "negative" if value < 0 else "over 2**63 - 1"
                raise ValueError(
                    f"{path}: {key}[{index}] {field} {value} is {where}: ids "
                    "must be integers in [0, 2**63 - 1] (COCOeval's int64); "
                    "renumber them"
                )
    for (key, field), (test, what) in FIELDS.items():
        for index, record in enumerate(dataset[key]):
            if field in record and not test(record[field]):
                raise ValueError(
                    f"{path}: {key}[{index}] (id={record.get('id')!r}) "
                    f"{field}={_shown(record[field])}: must be {what}"
                )
    repeat = _first_repeat([c["id"] for c in dataset["categories"]])
    if repeat:
        cid = dataset["categories"][repeat[1]]["id"]
        raise ValueError(f"{path}: categories[{repeat[1]}] repeats id {cid}")
    problem = category_ids.problem(
        dataset["categories"], dataset["annotations"]
    )
    if problem:
        raise ValueError(f"{path}: {problem}")
    images = dataset["images"]
    repeat = _first_repeat([im["id"] for im in images])
    if repeat:
        first, again = (images[i] for i in repeat)
        raise ValueError(
            f"{path}: images[{repeat[1]}] repeats id {again['id']} of "
            f"images[{repeat[0]}] (file_name {first['file_name']!r} and "
            f"{again['file_name']!r}); image ids must be unique"
        )
    _check_one_id_per_file(path, images)


def _check_one_id_per_file(path: str, images: list[dict]) -> None:
    """ValueError naming the first file two image records name (compared
    normalised: './a.png' is 'a.png'), with both ids: merged exports list
    one file twice, which would train twice per epoch and count twice in
    COCOeval."""
    repeat = _first_repeat([os.path.normpath(im["file_name"]) for im in images])
    if repeat:
        first, again = (images[i] for i in repeat)
        raise ValueError(
            f"{path}: images[{repeat[1]}] (id={again['id']}) file_name "
            f"{again['file_name']!r} is the file of images[{repeat[0]}] "
            f"(id={first['id']}); one file under two image ids would be "
            "trained twice per epoch and counted twice by COCOeval: keep "
            "one record and move the other's annotations to its id"
        )


def check_file_names(path: str, images: list[dict], image_dir: str) -> None:
    """ValueError naming the first image whose file_name leads outside
    `image_dir` (`../`, an absolute path); `data.allow_outside_images`
    lifts it. Compared as written, so links inside the folder stay
    usable."""
    folder = os.path.normpath(os.path.abspath(image_dir))
    for image in images:
        name = image["file_name"]
        target = os.path.normpath(os.path.join(folder, name))
        if os.path.commonpath([folder, target]) != folder:
            raise ValueError(
                f"{path}: images (id={image['id']!r}) file_name={name!r} "
                f"leads outside the image folder {image_dir}; set "
                "config.data.allow_outside_images=True to read it"
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
    """Sets the 'iscrowd' (0) and 'area' COCOeval needs where they lack,
    and recomputes a zero or negative area (module docstring)."""
    crowd = area = recomputed = 0
    for annotation in annotations:
        if "iscrowd" not in annotation:
            annotation["iscrowd"] = 0
            crowd += 1
        if "area" not in annotation:
            annotation["area"] = _area(
                annotation, images[annotation["image_id"]]
            )
            area += 1
        elif annotation["area"] <= 0:
            annotation["area"] = _area(
                annotation, images[annotation["image_id"]]
            )
            recomputed += 1
    if crowd or area:
        logging.warning(
            "%s: filled defaults for evaluation: iscrowd=0 on %d "
            "annotations, area (segmentation pixels, else box w*h) on %d",
            source,
            crowd,
            area,
        )
    if recomputed:
        logging.warning(
            "%s: recomputed the zero or negative area of %d annotations "
            "(segmentation pixels, else box w*h), as COCOeval would "
            "otherwise ignore them",
            source,
            recomputed,
        )
