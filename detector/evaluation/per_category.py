"""Per-category AP: the rows stored in the eval result and the table
printed after each evaluation (docs/training.md)."""

# Name/AP pairs on one printed row.
PAIRS_PER_ROW = 3


def rows(per_category: dict[int, float], names: dict[int, str]) -> list[dict]:
    """[{"id", "name", "AP"}] in category-id order; AP -1 where the images
    hold no ground truth of the category."""
    return [
        {"id": int(c), "name": names.get(c, str(c)), "AP": float(ap)}
        for c, ap in sorted(per_category.items())
    ]


def _shown(name: str) -> str:
    """A category name as the console shows it: control characters and
    other unprintable ones escaped."""
    return name if name.isprintable() else ascii(name)[1:-1]


def _labels(category_rows: list[dict]) -> list[str]:
    """Each row's name as shown, with its id where another row has the
    same name (a Roboflow export's two "facade")."""
    names = [r["name"] for r in category_rows]
    return [
        _shown(r["name"])
        + (f" (id {r['id']})" if names.count(r["name"]) > 1 else "")
        for r in category_rows
    ]


def table(iou_type: str, category_rows: list[dict]) -> str:
    """`rows` as a table, PAIRS_PER_ROW categories a line; '-' for an
    undefined AP; names that repeat carry their ids."""
    cells = [
        (label, "-" if r["AP"] < 0 else f"{r['AP']:.3f}")
        for label, r in zip(_labels(category_rows), category_rows, strict=True)
    ]
    width = max([len("category"), *(len(n) for n, _ in cells)])
    pairs = min(PAIRS_PER_ROW, max(len(cells), 1))
    head = " | ".join([f"{'category':<{width}} {'AP':>5}"] * pairs)
    lines = [
        f"COCO {iou_type} AP per category (IoU 0.50:0.95):",
        head,
        "-" * len(head),
    ]
    for start in range(0, len(cells), PAIRS_PER_ROW):
        lines.append(
            " | ".join(
                f"{name:<{width}} {ap:>5}"
                for name, ap in cells[start : start + PAIRS_PER_ROW]
            )
        )
    return "\n".join(lines)
