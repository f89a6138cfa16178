"""Input data: COCO (folder or TFDS), synthetic shapes, tf.data pipelines."""

from detector.data.pipeline import ensure_shapes_dataset
from detector.data.pipeline import eval_split
from detector.data.pipeline import EvalSplit
from detector.data.pipeline import train_batches

__all__ = ["EvalSplit", "ensure_shapes_dataset", "eval_split",
           "train_batches"]
