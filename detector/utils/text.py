"""Text printed to a terminal with its control characters escaped: a file
name holding ESC, CR or a bidi override is shown, never obeyed (the error,
skipped and log lines of every entry point that name a path)."""

import unicodedata

# Unicode categories shown escaped: control (C0, DEL, C1) and format
# (bidi overrides, zero-width characters).
_ESCAPED = ("Cc", "Cf")


def _escaped(char: str) -> str:
    if unicodedata.category(char) not in _ESCAPED:
        return char
    return repr(char)[1:-1] if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(value: object) -> str:
    """str(value) with each control or format character as its Python
    escape (`\\x1b`, `\\r`, `\\u202e`); other text, any script, kept."""
    return "".join(map(_escaped, str(value)))
