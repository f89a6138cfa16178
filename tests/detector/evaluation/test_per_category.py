"""The per-category table tells apart categories of one name."""

from detector.evaluation import per_category


def test_categories_of_one_name_are_told_apart_by_id():
    """A Roboflow export's two "facade" (ids 1 and 3) once printed two
    identical rows."""
    rows = per_category.rows(
        {1: 0.5, 2: 0.25, 3: -1.0}, {1: "facade", 2: "window", 3: "facade"}
    )
    lines = per_category.table("bbox", rows).splitlines()
    assert lines[3].split(" | ") == [
        "facade (id 1) 0.500",
        "window        0.250",
        "facade (id 3)     -",
    ]


def test_unique_names_are_shown_alone():
    rows = per_category.rows({1: 0.5}, {1: "circle"})
    assert per_category.table("segm", rows).splitlines()[3] == (
        "circle   0.500"
    )
