"""predict.json's schema: every key a caller reads, checked in one place,
for each format version (docs/export-and-predict.md)."""

import hashlib
import json
import re
from collections.abc import Callable

from detector.utils import image_ranges, ranges

_SHA256 = re.compile(r"[0-9a-f]{64}")
_ARTIFACT = "predict.jax"
# predict.json's "format_version": 3 lists "canvases", one function each,
# stored one after another in predict.jax ("canvas_bytes"), then the
# weights every function takes as its first argument ("weights_bytes").
# Format 2 is the same without the weights section: each function holds the
# weights. Format 1 (no "format_version") has one function, all of
# predict.jax, whose input size is "image_size" (also inside "resize").
FORMAT_VERSION = 3
# Keys whose values the serialized program was exported for: the images'
# sizes on the canvases follow from "resize", and the program normalises
# with the pixel statistics inside it. Each within its range, an edit
# still breaks the artifact (min_size=max_size=1: every photo 1 x 1), so
# export.py records a digest of each ("bound_sha256", format 3); an
# artifact without it loads as before.
BOUND_KEYS = ("resize", "pixel_mean", "pixel_std")
BOUND_DIGESTS = "bound_sha256"


class MetaError(ValueError):
    """A predict.json value that breaks the schema; one line."""


def _integer(value: object, minimum: int = 0) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= minimum
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(count: int, positive: bool = False) -> Callable[[object], bool]:
    def test(value: object) -> bool:
        return (
            isinstance(value, list)
            and len(value) == count
            and all(_number(v) and (v > 0 or not positive) for v in value)
        )

    return test


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _texts(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(map(_text, value))


def _category(value: object) -> bool:
    return (
        isinstance(value, dict)
        and _integer(value.get("id"), 1)
        and isinstance(value.get("name"), str)
    )


def _categories(value: object) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(map(_category, value))
    )


def _backends(value: object) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(
            _text(platform)
            and isinstance(sites, dict)
            and all(_text(k) and _text(v) for k, v in sites.items())
            for platform, sites in value.items()
        )
    )


def _canvas(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(_integer(v, 1) for v in value)
    )


def _canvases(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) in (1, 2)
        and all(map(_canvas, value))
    )


def _byte_counts(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(_integer(v, 1) for v in value)
    )


Schema = tuple[tuple[str, Callable[[object], bool], str], ...]
# (key, test, what the value must be) of the keys every format has.
_COMMON: Schema = (
    (
        "resize",
        lambda v: isinstance(v, dict) and isinstance(v.get("rule"), str),
        'an object {"rule": name, ...its sizes}',
    ),
    ("batch_sizes", _text, "the batch dimension's name, a string"),
    ("pixel_mean", _numbers(3), "three numbers"),
    ("pixel_std", _numbers(3, positive=True), "three positive numbers"),
    (
        "categories",
        _categories,
        'a non-empty list of {"id": integer >= 1, "name": string}',
    ),
    ("num_classes", lambda v: _integer(v, 1), "the model's class count >= 1"),
    (
        "nms_backend",
        _backends,
        'an object of platform: {"rpn": backend, "detection": backend}',
    ),
    ("jax_version", _text, "a version string"),
    ("calling_convention_version", _integer, "an integer"),
    ("platforms", _texts, "a non-empty list of platform names"),
    ("checkpoint_step", _integer, "an integer >= 0"),
    ("mask_paste", _text, "a mask pasting rule's name"),
    (
        "sha256",
        lambda v: isinstance(v, str) and bool(_SHA256.fullmatch(v)),
        "64 lowercase hex digits",
    ),
)
_CANVASES: Schema = (
    (
        "canvases",
        _canvases,
        "one or two [height, width] canvases (landscape, portrait) of "
        "positive integers",
    ),
    (
        "canvas_bytes",
        _byte_counts,
        "the byte count of each canvas's function, positive integers",
    ),
)
# format version -> its keys, in predict.json's order.
SCHEMAS: dict[int, Schema] = {
    1: (
        ("image_size", _canvas, "[height, width], two positive integers"),
        *_COMMON,
    ),
    2: (("format_version", lambda v: v == 2, "2"), *_CANVASES, *_COMMON),
    3: (
        ("format_version", lambda v: v == 3, "3"),
        *_CANVASES,
        (
            "weights_bytes",
            _integer,
            "the byte count of the weights section, an integer >= 0",
        ),
        *_COMMON,
    ),
}
SCHEMA = SCHEMAS[FORMAT_VERSION]
REQUIRED_KEYS = tuple(key for key, _, _ in SCHEMA)


# predict.json key -> the config field whose declared range it takes (the
# canvases each, resize's sizes eval's one).
CONFIG_FIELDS = (
    ("image_size", "data.image_size"),
    ("canvases", "data.image_size"),
    ("resize.min_size", "data.min_size"),
    ("resize.max_size", "data.max_size"),
    ("pixel_mean", "data.pixel_mean"),
    ("pixel_std", "data.pixel_std"),
    ("num_classes", "data.num_classes"),
)
# predict.json key -> its range (`image_ranges`, the config's own).
RANGES: dict[str, ranges.Range | ranges.Each] = {
    "image_size": image_ranges.IMAGE_SIZE,
    "canvases": image_ranges.IMAGE_SIZE,
    "resize.min_size": image_ranges.MIN_SIZE.item,
    "resize.max_size": image_ranges.MAX_SIZE,
    "pixel_mean": image_ranges.PIXEL_MEAN,
    "pixel_std": image_ranges.PIXEL_STD,
    "num_classes": image_ranges.NUM_CLASSES,
}
# Keys whose values are integers, as the config's are.
_INTEGER_KEYS = {
    "image_size",
    "canvases",
    "resize.min_size",
    "resize.max_size",
    "num_classes",
}


def _value(meta: dict, key: str) -> tuple[bool, object]:
    """(found, value) of dotted `key` in `meta`."""
    node: object = meta
    for name in key.split("."):
        if not isinstance(node, dict) or name not in node:
            return False, None
        node = node[name]
    return True, node


def _check_ranges(meta: dict, where: str) -> None:
    """Each field of CONFIG_FIELDS within its config field's range (each
    canvas of "canvases")."""
    for key, field in CONFIG_FIELDS:
        found, value = _value(meta, key)
        spec, integer = RANGES[key], key in _INTEGER_KEYS
        items = value if key == "canvases" and found else [value]
        if found and not all(spec.admits(v, integer) for v in items):
            raise MetaError(
                f"{where}: {key}={_shown(value)}: must be "
                f"{ranges.requirement(spec, integer)}, as config {field}; "
                "restore the exported value or export again"
            )


def version(meta: dict) -> int:
    """The format version of a predict.json object (1 when unnamed)."""
    return meta.get("format_version", 1)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check(meta: object, where: str, mask_pasters: tuple[str, ...]) -> None:
    """Raises MetaError (one line naming `where` and the key) unless `meta`
    is a predict.json object that follows the schema of its format version
    (`SCHEMAS`) and names one of `mask_pasters`."""
    if not isinstance(meta, dict):
        raise MetaError(f"{where}: not a JSON object")
    found = version(meta)
    if not _integer(found) or found not in SCHEMAS:
        raise MetaError(
            f"{where}: format_version={_shown(found)}: must be one of "
            f"{', '.join(map(str, SCHEMAS))} (an export of a newer version? "
            "export it again with this one)"
        )
    schema = SCHEMAS[found]
    missing = [key for key, _, _ in schema if key not in meta]
    if missing:
        raise MetaError(
            f"{where}: lacks {', '.join(missing)} (an export of another "
            "version? run export.py on the workdir again)"
        )
    for key, test, what in schema:
        if not test(meta[key]):
            raise MetaError(
                f"{where}: {key}={_shown(meta[key])}: must be {what}"
            )
    if found > 1 and len(meta["canvas_bytes"]) != len(meta["canvases"]):
        raise MetaError(
            f"{where}: canvas_bytes lists {len(meta['canvas_bytes'])} "
            f"functions but canvases {len(meta['canvases'])}; restore the "
            "exported values or export again"
        )
    _check_ranges(meta, where)
    if len(meta["categories"]) != meta["num_classes"]:
        raise MetaError(
            f"{where}: categories lists {len(meta['categories'])} classes "
            f"but the model has {meta['num_classes']} (num_classes); "
            "restore the exported list (names may be edited, entries not "
            "added or removed)"
        )
    _check_unique_ids(meta["categories"], where)
    _check_bound(meta, where)
    if meta["mask_paste"] not in mask_pasters:
        raise MetaError(
            f"{where}: mask_paste={meta['mask_paste']!r}: must be one of "
            f"{', '.join(mask_pasters)}"
        )


def bound_digests(meta: dict) -> dict[str, str]:
    """{key: sha256 of the key's value as compact JSON} of each of
    BOUND_KEYS: export.py's record of what the program was exported for."""
    return {
        key: hashlib.sha256(
            json.dumps(
                meta[key], sort_keys=True, separators=(",", ":")
            ).encode()
        ).hexdigest()
        for key in BOUND_KEYS
    }


def _check_bound(meta: dict, where: str) -> None:
    """Each of BOUND_KEYS as exported, where predict.json records digests
    of them (BOUND_DIGESTS)."""
    if BOUND_DIGESTS not in meta or version(meta) != FORMAT_VERSION:
        return
    recorded = meta[BOUND_DIGESTS]
    if not isinstance(recorded, dict) or not all(
        isinstance(recorded.get(key), str) for key in BOUND_KEYS
    ):
        raise MetaError(
            f"{where}: {BOUND_DIGESTS}={_shown(recorded)}: must be an object "
            f"of {', '.join(BOUND_KEYS)}: sha256 hex digest, as export.py "
            "writes it; restore it or export again"
        )
    for key, digest in bound_digests(meta).items():
        if recorded[key] != digest:
            raise MetaError(
                f"{where}: {key}={_shown(meta[key])}: not the value "
                f"{_ARTIFACT} was exported for ({BOUND_DIGESTS} records "
                "it); restore the exported value or export again"
            )


def _check_unique_ids(categories: list[dict], where: str) -> None:
    """Each category id once: the model's ids are inside predict.jax."""
    names: dict[int, list[str]] = {}
    for category in categories:
        names.setdefault(category["id"], []).append(category["name"])
    for id_, named in names.items():
        if len(named) > 1:
            raise MetaError(
                f"{where}: categories lists id {id_} twice "
                f"({', '.join(map(repr, named))}); restore "
                "the exported list (names may be edited, ids not)"
            )


def check_predicted_ids(known: list[int], outputs: dict, where: str) -> None:
    """Raises MetaError when a valid detection of `outputs` (category_ids
    int[b, K], num_valid int[b]) has an id `known` (predict.json's
    categories) lacks: an edit dropped it, and nothing would name it."""
    ids = outputs["category_ids"]
    valid = [ids[i, :count] for i, count in enumerate(outputs["num_valid"])]
    lost = sorted({int(v) for row in valid for v in row} - set(known))
    if lost:
        raise MetaError(
            f"{where}: the model predicted category id {lost[0]}, which "
            "categories does not list (num_classes or categories edited?); "
            "restore the exported values or export again"
        )


def current(meta: dict) -> dict:
    """A checked predict.json in the keys of FORMAT_VERSION (its
    "format_version" kept): before format 3 the functions hold the weights
    ("weights_bytes" None); format 1's image_size becomes its one canvas,
    leaves "resize", and its function is all of predict.jax
    ("canvas_bytes" None)."""
    found = version(meta)
    if found == FORMAT_VERSION:
        return meta
    if found > 1:
        return meta | {"weights_bytes": None}
    resize = {k: v for k, v in meta["resize"].items() if k != "image_size"}
    rest = {k: v for k, v in meta.items() if k != "image_size"}
    return rest | {
        "format_version": 1,
        "canvases": [meta["image_size"]],
        "canvas_bytes": None,
        "weights_bytes": None,
        "resize": resize,
    }
