"""Text printed to a terminal: control characters escaped."""

from detector.utils import text


def test_control_and_format_characters_are_escaped():
    assert text.printable("a\x1b[31mb\rc\x07\u202ed\x9b.png") == (
        "a\\x1b[31mb\\rc\\x07\\u202ed\\x9b.png"
    )


def test_plain_text_and_other_scripts_are_kept():
    name = "photos/été 写真 a b.jpg"
    assert text.printable(name) == name
