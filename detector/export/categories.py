"""The categories a trained model names (COCO ids and names of classes
1..C), read where training read them, without the input pipeline."""

import json
import pathlib

import ml_collections

from detector.data import category_ids


def _from_annotations(path: pathlib.Path) -> list[dict]:
    """The categories of an instances JSON, held to the rule of
    `category_ids` (a run trained before its load held it)."""
    try:
        dataset = json.loads(path.read_text())
        listed = [
            {"id": int(c["id"]), "name": str(c["name"])}
            for c in dataset["categories"]
        ]
        annotations = [
            a for a in dataset.get("annotations") or [] if isinstance(a, dict)
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(
            f"{path}: no readable 'categories' with id and name ({e})"
        ) from None
    problem = category_ids.problem(listed, annotations)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return sorted(listed, key=lambda c: c["id"])


def _from_tfds(data: ml_collections.ConfigDict) -> list[dict]:
    from detector.data.sources import (
        tfds as tfds_coco,  # TensorFlow: only for TFDS runs
    )

    builder = tfds_coco.TfdsCoco(data)
    return [
        {"id": i, "name": n}
        for i, n in zip(builder.category_ids, builder.label_names, strict=True)
    ]


def categories(config: ml_collections.ConfigDict) -> list[dict]:
    """[{"id", "name"}] of classes 1..C, in class order.

    Raises:
      ValueError / FileNotFoundError: the categories cannot be read, or
        their count is not data.num_classes (named).
    """
    # TensorFlow (for TFDS) only where it is needed.
    from detector.data import shapes_writer as shapes
    from detector.data import splits

    data = config.data
    if data.source == "tfds":
        found = _from_tfds(data)
        where = f"tfds {data.tfds_name}"
    else:
        name = splits.parse_split(data.train_split)[0]
        path = (
            pathlib.Path(data.root) / "annotations" / f"instances_{name}.json"
        )
        where = str(path)
        if path.exists():
            found = _from_annotations(path)
        elif data.source == "shapes":
            found = [
                {"id": c["id"], "name": c["name"]} for c in shapes.CATEGORIES
            ]
        else:
            raise FileNotFoundError(
                f"{path}: missing; the categories of the model are read "
                "from its training annotations (set --config.data.root)"
            )
    if len(found) != data.num_classes:
        raise ValueError(
            f"{where}: {len(found)} categories but data.num_classes is "
            f"{data.num_classes}"
        )
    return found
