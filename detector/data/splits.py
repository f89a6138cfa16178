"""Split names with an optional TFDS-style slice ('val2017[:500]'); pure
Python, so what needs only a split's name imports no COCO tools."""

import re

_SPLIT_RE = re.compile(
    r"^(?P<name>[^\[\]]+?)"
    r"(?:\[(?P<start>-?\d+%?)?:(?P<stop>-?\d+%?)?\])?$"
)


def parse_split(split: str) -> tuple[str, str | None, str | None]:
    """Splits 'val2017[:500]' into ('val2017', None, '500'); checks syntax."""
    match = _SPLIT_RE.match(split.strip())
    if not match:
        raise ValueError(
            f"split {split!r}: expected NAME, NAME[start:stop] or "
            "NAME[start%:stop%], e.g. 'val2017[:500]'"
        )
    return match["name"], match["start"], match["stop"]
