"""TFDS coco/2017 as a source: raw records, decoding, COCO ground truth.

TFDS coco/2017 carries boxes, labels and crowd flags but no segmentation, so
this source has no masks (`has_masks=False`). Records are read with the image
left encoded, so skipping records (resume, host sharding) costs no decoding.
"""

from absl import logging
import ml_collections
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from detector.data import coco

_warned_no_masks = [False]


class TfdsCoco:
    """A TFDS COCO builder (`data.tfds_name`, `data.tfds_data_dir`)."""

    def __init__(self, data: ml_collections.ConfigDict):
        self.name = data.tfds_name
        try:
            self.builder = tfds.builder(self.name,
                                        data_dir=data.tfds_data_dir or None)
        except Exception as e:  # tfds raises many types for a bad name
            raise ValueError(f"data.tfds_name={self.name!r}: "
                             f"{str(e).splitlines()[0]}") from None
        self.label_names = list(
                self.builder.info.features["objects"]["label"].names)
        if len(self.label_names) != data.num_classes:
            raise ValueError(
                    f"tfds {self.name}: {len(self.label_names)} labels but "
                    f"data.num_classes is {data.num_classes}")
        self.category_ids = coco.category_ids_for_tfds(self.label_names)
        self.has_masks = False
        if not _warned_no_masks[0]:
            _warned_no_masks[0] = True
            logging.warning("tfds %s has no instance segmentations: mask "
                            "targets are off (mask_valid=False) and segm "
                            "evaluation is unavailable", self.name)

    def raw(self, split: str, shuffle_seed: int | None = None
            ) -> tf.data.Dataset:
        """Records of `split` with the image still encoded.

        `shuffle_seed` shuffles the file order (deterministically); None reads
        in the stored order.
        """
        read_config = tfds.ReadConfig(shuffle_seed=shuffle_seed,
                                      try_autocache=False)
        try:
            return self.builder.as_dataset(
                    split=split, shuffle_files=shuffle_seed is not None,
                    decoders={"image": tfds.decode.SkipDecoding()},
                    read_config=read_config)
        except AssertionError as e:  # not downloaded / prepared
            where = self.builder.data_dir
            raise FileNotFoundError(
                    f"{where}: tfds {self.name} is not prepared there "
                    f"({str(e).splitlines()[0][:120]}...); run "
                    f"`tfds build {self.name}` or set data.tfds_data_dir"
            ) from None
        except (KeyError, ValueError) as e:
            raise ValueError(f"split {split!r} of tfds {self.name}: "
                             f"{str(e).splitlines()[0]}") from None

    def num_examples(self, split: str) -> int:
        """Number of records of `split` (cardinality, or counted once)."""
        dataset = self.raw(split)
        count = int(dataset.cardinality())
        if count < 0:
            count = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
        return count

    @staticmethod
    def decode(record: dict, training: bool) -> dict:
        """Record -> example (image uint8, image_id; targets when training).

        Training targets drop crowd regions and zero-size boxes; classes are
        the TFDS labels + 1.
        """
        image = tf.io.decode_image(record["image"], channels=3,
                                   expand_animations=False)
        example = {"image": image, "image_id": record["image/id"]}
        if not training:
            return example
        objects = record["objects"]
        hw = tf.cast(tf.shape(image)[:2], tf.float32)
        ymin, xmin, ymax, xmax = tf.unstack(
                tf.reshape(objects["bbox"], [-1, 4]), axis=1)
        boxes = tf.stack([xmin * hw[1], ymin * hw[0], xmax * hw[1],
                          ymax * hw[0]], axis=1)
        keep = (tf.logical_not(objects["is_crowd"])
                & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))
        example["boxes"] = tf.boolean_mask(boxes, keep)
        example["classes"] = tf.cast(
                tf.boolean_mask(objects["label"], keep), tf.int32) + 1
        return example

    def ground_truth(self, split: str, max_images: int = 0
                     ) -> tuple[dict, list[int]]:
        """COCO GT dict of `split` (first `max_images`) and its image ids."""
        dataset = self.raw(split)
        if max_images > 0:
            dataset = dataset.take(max_images)

        def header(record):
            shape = tf.image.extract_jpeg_shape(record["image"])
            return {"image/id": record["image/id"], "height": shape[0],
                    "width": shape[1], "objects": record["objects"]}

        examples = dataset.map(header).as_numpy_iterator()
        return coco.tfds_ground_truth(examples, self.label_names,
                                      f"tfds {self.name} {split}")
