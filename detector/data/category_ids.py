"""The one rule for category ids, held by every stage (training, eval,
export, predict): COCO's ids start at 1, since 0 marks an empty detection
slot in the model's outputs; a category 0 (a Roboflow export's placeholder
class) is refused when the annotations load, before anything is written
(docs/bad-input.md)."""

FIRST_ID = 1


def problem(categories: list[dict], annotations: list[dict]) -> str | None:
    """Why `categories` (an instances JSON's, ids already integers) break
    the rule, naming the first such category and how many of
    `annotations` use it; None when they do not."""
    for index, category in enumerate(categories):
        cid = category["id"]
        if cid < FIRST_ID:
            uses = sum(a.get("category_id") == cid for a in annotations)
            return (
                f"categories[{index}] (id={cid}, name "
                f"{category.get('name')!r}): category ids start at "
                f"{FIRST_ID} (0 marks an empty detection slot in the model's "
                f"outputs); give it an unused id >= {FIRST_ID} and its "
                f"annotations too ({uses} use it), or remove it if none does"
            )
    return None
