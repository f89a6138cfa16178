"""predict.json's schema: every key a caller reads, checked in one place
(docs/export-and-predict.md)."""

import re
from collections.abc import Callable

_SHA256 = re.compile(r"[0-9a-f]{64}")


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


def _image_size(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(_integer(v, 1) for v in value)
    )


# (key, test, what the value must be), in predict.json's order.
SCHEMA: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("image_size", _image_size, "[height, width], two positive integers"),
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
REQUIRED_KEYS = tuple(key for key, _, _ in SCHEMA)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check(meta: object, where: str, mask_pasters: tuple[str, ...]) -> None:
    """Raises MetaError (one line naming `where` and the key) unless `meta`
    is a predict.json object that follows SCHEMA and names one of
    `mask_pasters`."""
    if not isinstance(meta, dict):
        raise MetaError(f"{where}: not a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in meta]
    if missing:
        raise MetaError(
            f"{where}: lacks {', '.join(missing)} (an export of another "
            "version? run export.py on the workdir again)"
        )
    for key, test, what in SCHEMA:
        if not test(meta[key]):
            raise MetaError(
                f"{where}: {key}={_shown(meta[key])}: must be {what}"
            )
    if len(meta["categories"]) != meta["num_classes"]:
        raise MetaError(
            f"{where}: categories lists {len(meta['categories'])} classes "
            f"but the model has {meta['num_classes']} (num_classes); "
            "restore the exported list (names may be edited, entries not "
            "added or removed)"
        )
    if meta["mask_paste"] not in mask_pasters:
        raise MetaError(
            f"{where}: mask_paste={meta['mask_paste']!r}: must be one of "
            f"{', '.join(mask_pasters)}"
        )
