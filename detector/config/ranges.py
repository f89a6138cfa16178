"""Declared ranges of the numeric config fields: one table per section,
checked before any check that combines fields (docs/training.md)."""

import math

import ml_collections

# The range types live with the services (predict.json's checks take the
# same declarations, detector/utils/image_ranges.py).
from detector.utils.ranges import (  # noqa: F401 - the tables' vocabulary
    Each,
    Range,
    Table,
    above,
    any_number,
    at_least,
    between,
    each,
    is_number,
)


def _numeric(value: object) -> bool:
    """A number, or a tuple (list) holding no strings: a ranged field."""
    if isinstance(value, tuple | list):
        return not any(isinstance(v, str) for v in value)
    return is_number(value)


def numeric_fields(
    config: ml_collections.ConfigDict, prefix: str
) -> dict[str, object]:
    """Dotted key -> value of every numeric field under `config`."""
    found = {}
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            found.update(numeric_fields(value, f"{prefix}{key}."))
        elif _numeric(value):
            found[f"{prefix}{key}"] = value
    return found


def _fail(key: str, value: object, words: str, meaning: str) -> None:
    reason = f" ({meaning})" if meaning else ""
    raise ValueError(f"config.{key}={value!r}: must be {words}{reason}")


def _check_number(key: str, value: object, spec: Range, integer: bool) -> None:
    kind = "an integer" if integer else "a number"
    if not is_number(value) or (integer and not isinstance(value, int)):
        _fail(key, value, kind, spec.meaning)
    if not math.isfinite(value):  # inf is >= 0, but not a usable value
        _fail(key, value, f"finite and {spec.words()}", spec.meaning)
    if not spec.holds(value):
        _fail(key, value, spec.words(), spec.meaning)


def _check_each(key: str, value: object, spec: Each, integer: bool) -> None:
    if not spec.admits(value, integer):
        _fail(key, value, spec.words(integer), spec.item.meaning)


def check(
    config: ml_collections.ConfigDict,
    section: str,
    table: Table,
    defaults: ml_collections.ConfigDict,
) -> None:
    """Checks every numeric field of `config[section]` against `table`.

    Args:
      config: the whole config.
      section: 'data', 'model', 'train', 'eval' (or '' for the top level's
        own fields).
      table: dotted key ('train.momentum') -> Range or Each.
      defaults: the section's defaults, whose types say which fields take
        integers only.

    Raises:
      ValueError: one line naming the first value outside its range.
      LookupError: a numeric field without a declared range, or a range
        for a field that does not exist (the table is wrong).
    """
    node = config[section] if section else config
    prefix = f"{section}." if section else ""
    fields = numeric_fields(node, prefix)
    if not section:  # the top level: its own fields, not the sections'
        fields = {k: v for k, v in fields.items() if "." not in k}
    expected = numeric_fields(defaults, prefix)
    unranged = sorted(set(fields) - set(table))
    if unranged:
        raise LookupError(
            f"config.{unranged[0]}: numeric field without a declared range "
            f"in the {section or 'top-level'} table"
        )
    for key, spec in table.items():
        if key not in fields and key not in expected:
            raise LookupError(f"config.{key}: ranged but not a config field")
        value = fields.get(key)
        default = expected.get(key)
        integer = (
            all(isinstance(v, int) for v in default) and bool(default)
            if isinstance(default, tuple | list)
            else isinstance(default, int)
        )
        if isinstance(spec, Each):
            _check_each(key, value, spec, integer)
        else:
            _check_number(key, value, spec, integer)
