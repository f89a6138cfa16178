"""Where a COCO-format folder keeps a split: COCO's layout
(ROOT/annotations/instances_<split>.json, images in ROOT/<split>/) or a
Roboflow COCO export (ROOT/<split>/_annotations.coco.json beside its
images). Light (no TensorFlow, no JAX): the entry points check a folder
with it before anything starts (docs/coco.md)."""

import dataclasses
import os

from detector.data import splits

# A Roboflow export's annotation file, one per split folder.
ROBOFLOW_FILE = "_annotations.coco.json"
LAYOUT = (
    "a COCO folder holds annotations/instances_<split>.json with the images "
    f"in <split>/ (or <split>/{ROBOFLOW_FILE} beside them, as a Roboflow "
    "COCO export does); see docs/coco.md"
)


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """A split's annotation file and the folder its file_names are in."""

    annotation_file: str
    image_dir: str


def _coco(root: str, name: str) -> SplitFiles:
    return SplitFiles(
        os.path.join(root, "annotations", f"instances_{name}.json"),
        os.path.join(root, name),
    )


def _roboflow(root: str, name: str) -> SplitFiles:
    folder = os.path.join(root, name)
    return SplitFiles(os.path.join(folder, ROBOFLOW_FILE), folder)


def present_splits(root: str) -> list[str]:
    """The split names `root` holds annotations of, in either layout."""
    found = set()
    annotations = os.path.join(root, "annotations")
    if os.path.isdir(annotations):
        for name in os.listdir(annotations):
            if name.startswith("instances_") and name.endswith(".json"):
                found.add(name[len("instances_") : -len(".json")])
    if os.path.isdir(root):
        for name in os.listdir(root):
            if os.path.isfile(_roboflow(root, name).annotation_file):
                found.add(name)
    return sorted(found)


def check_root(root: str, key: str = "data.root") -> None:
    """Raises FileNotFoundError / NotADirectoryError (one line naming
    config `key`, what is wrong and the layout expected) unless `root` is a
    folder that holds something."""
    where = f"config.{key}={root!r}"
    if not root:
        raise ValueError(
            f"{where}: not set; name your dataset folder with "
            f"--config.{key}=DIR: {LAYOUT}"
        )
    if not os.path.exists(root):
        raise FileNotFoundError(f"{where}: no such folder; {LAYOUT}")
    if not os.path.isdir(root):
        raise NotADirectoryError(f"{where}: a file, not a folder; {LAYOUT}")
    if not os.listdir(root):
        raise FileNotFoundError(f"{where}: an empty folder; {LAYOUT}")


def locate(root: str, split: str, key: str) -> SplitFiles:
    """The files of `split` (config `key`, 'data.train_split') in `root`,
    COCO's layout first.

    Raises:
      FileNotFoundError: one line naming what is missing, the splits the
        folder holds and the layout expected.
    """
    check_root(root)
    name, _, _ = splits.parse_split(split)
    for layout in (_coco, _roboflow):
        files = layout(root, name)
        if os.path.isfile(files.annotation_file):
            if not os.path.isdir(files.image_dir):
                raise FileNotFoundError(
                    f"{files.image_dir}: image folder of "
                    f"{files.annotation_file} does not exist; {LAYOUT}"
                )
            return files
    present = present_splits(root)
    hint = (
        f"splits there: {', '.join(present)}; name one with --config.{key}=..."
        if present
        else f"no split there; {LAYOUT}"
    )
    raise FileNotFoundError(
        f"config.{key}={split!r}: {root} holds no "
        f"annotations/instances_{name}.json (nor {name}/{ROBOFLOW_FILE}); "
        f"{hint}"
    )
