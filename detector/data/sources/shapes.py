"""The `shapes` source: the synthetic set under `data.root`, read as
`coco_json` once `prepare` has written its missing or stale splits
(`data/shapes_dataset.py`)."""

import ml_collections

from detector.data import shapes_dataset
from detector.data.sources import coco_json


class ShapesSource(coco_json.CocoJsonSource):
    """One split of the shapes set; `prepare` writes it when needed."""

    @staticmethod
    def prepare(config: ml_collections.ConfigDict) -> None:
        shapes_dataset.ensure_dataset(config)
