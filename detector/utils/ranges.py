"""Declared ranges of numbers: where a number may lie, in words for error
lines (the config's tables, detector/config/ranges.py, and predict.json's
checks)."""

import dataclasses
import math


def is_number(value: object) -> bool:
    """An int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(bound: float) -> str:
    """A bound in words: integers in full (2147483647, not 2.14748e+09)."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


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

    def admits(self, value: object, integer: bool = False) -> bool:
        """`value` is a number (an int where `integer`) that `holds`."""
        return (
            is_number(value)
            and (isinstance(value, int) or not integer)
            and self.holds(value)
        )

    def words(self) -> str:
        """'>= 1', '> 0', 'in [0, 1)' or 'a finite number'."""
        if self.low is not None and self.high is not None:
            return (
                f"in {'(' if self.low_open else '['}{_shown(self.low)}, "
                f"{_shown(self.high)}{')' if self.high_open else ']'}"
            )
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_shown(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_shown(self.high)}"
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
    max_length: int | None = None
    ordered: bool = False
    shape: str = ""

    def admits(self, value: object, integer: bool = False) -> bool:
        """`value` is a list or tuple whose items this admits."""
        if not isinstance(value, tuple | list):
            return False
        return (
            (self.length is None or len(value) == self.length)
            and len(value) >= self.min_length
            and (self.max_length is None or len(value) <= self.max_length)
            and all(self.item.admits(v, integer) for v in value)
            and (not self.ordered or list(value) == sorted(value))
        )

    def words(self, integer: bool = False) -> str:
        if self.length is not None:
            count = f"{self.length}"
        elif self.max_length is not None:
            count = f"{self.min_length} to {self.max_length}"
        else:
            count = f"{self.min_length} or more"
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


def requirement(spec: Range | Each, integer: bool = False) -> str:
    """What `spec` asks, in words: 'an integer in [1, 4096] (pixels)'."""
    if isinstance(spec, Each):
        words, meaning = spec.words(integer), spec.item.meaning
    else:
        kind = "an integer" if integer else "a number"
        words, meaning = f"{kind} {spec.words()}", spec.meaning
    return f"{words} ({meaning})" if meaning else words
