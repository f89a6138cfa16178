"""Declared ranges of the numeric config fields: one table per section,
checked before any check that combines fields (docs/training.md)."""

import dataclasses
import math

import ml_collections


@dataclasses.dataclass(frozen=True)
class Range:
    """Where a number may lie: [low, high], either end open or absent.

    Integer fields (their default is an int) take only integers.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    meaning: str = ""

    def holds(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (
            value < self.low or (self.low_open and value == self.low)
        ):
            return False
        return self.high is None or not (
            value > self.high or (self.high_open and value == self.high)
        )

    def words(self) -> str:
        """'>= 1', '> 0', 'in [0, 1)' or 'a finite number'."""
        if self.low is not None and self.high is not None:
            return (
                f"in {'(' if self.low_open else '['}{self.low:g}, "
                f"{self.high:g}{')' if self.high_open else ']'}"
            )
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "a finite number"

    def outside(self) -> float:
        """A value this range refuses (for the tests that walk the tables)."""
        if self.low is not None:
            return self.low if self.low_open else self.low - 1
        if self.high is not None:
            return self.high if self.high_open else self.high + 1
        return math.nan


@dataclasses.dataclass(frozen=True)
class Each:
    """A tuple of numbers, each in `item`: of `length` items (or at least
    `min_length`), ascending when `ordered`; `shape` names the tuple."""

    item: Range
    length: int | None = None
    min_length: int = 0
    ordered: bool = False
    shape: str = ""

    def words(self, integer: bool = False) -> str:
        count = (
            f"{self.length}"
            if self.length is not None
            else f"{self.min_length} or more"
        )
        kind = "integers" if integer else "numbers"
        text = f"{count} {kind}, each {self.item.words()}"
        if self.ordered:
            text += ", ascending"
        return f"{self.shape}: {text}" if self.shape else text


def at_least(low: float, meaning: str = "") -> Range:
    return Range(low=low, meaning=meaning)


def above(low: float, meaning: str = "") -> Range:
    return Range(low=low, low_open=True, meaning=meaning)


def between(
    low: float,
    high: float,
    meaning: str = "",
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Range:
    return Range(low, high, low_open, high_open, meaning)


def any_number(meaning: str = "") -> Range:
    return Range(meaning=meaning)


def each(item: Range, **kwargs) -> Each:
    return Each(item, **kwargs)


Table = dict[str, Range | Each]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numeric(value: object) -> bool:
    """A number, or a tuple (list) holding no strings: a ranged field."""
    if isinstance(value, tuple | list):
        return not any(isinstance(v, str) for v in value)
    return _number(value)


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
    if not _number(value) or (integer and not isinstance(value, int)):
        _fail(key, value, kind, spec.meaning)
    if not math.isfinite(value):  # inf is >= 0, but not a usable value
        _fail(key, value, f"finite and {spec.words()}", spec.meaning)
    if not spec.holds(value):
        _fail(key, value, spec.words(), spec.meaning)


def _check_each(key: str, value: object, spec: Each, integer: bool) -> None:
    items = tuple(value) if isinstance(value, tuple | list) else None
    if (
        items is None
        or (spec.length is not None and len(items) != spec.length)
        or len(items) < spec.min_length
        or not all(
            _number(v)
            and (isinstance(v, int) or not integer)
            and spec.item.holds(v)
            for v in items
        )
        or (spec.ordered and list(items) != sorted(items))
    ):
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
