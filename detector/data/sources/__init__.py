"""Data sources side by side, each one split of one dataset behind the
`base.Source` protocol: a COCO-format folder (`coco_json`), the synthetic
shapes set (`shapes`) and TFDS `coco/2017` (`tfds`). Their names are here,
without TensorFlow; `detector.data.pipeline.SOURCES` maps them to classes."""

# data.source: the keys of detector.data.pipeline.SOURCES.
NAMES = ("shapes", "coco_json", "tfds")


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown source."""
    if name not in NAMES:
        raise ValueError(
            f"config.{key}={name!r} is not one of {', '.join(NAMES)}"
        )
