"""TFDS coco/2017 as a source: raw records, decoding, COCO ground truth.

TFDS coco/2017 carries boxes, labels and crowd flags but no segmentation, so
this source has no masks (`has_masks=False`). Records are read with the image
left encoded, so skipping records (resume, host sharding) costs no decoding.

Shapes: h, w original image; N objects of a record (crowd regions and empty
boxes included); C classes (the builder's labels).

  record   image string (encoded), image/id int64, image/filename string,
           objects: bbox f32[N, 4] normalised (ymin, xmin, ymax, xmax),
           label i64[N] 0..C-1, is_crowd bool[N], area i64[N]
  example  image uint8[h, w, 3], image_id int64; when training also
           boxes f32[N', 4] (x1, y1, x2, y2) pixels, classes i32[N'] 1..C

A record whose image bytes are no known image format fails with one line
naming its image/filename and image/id.
"""

from collections.abc import Iterator

from absl import logging
import ml_collections
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from detector.data import coco

_warned_no_masks = [False]
# Features the source reads, as paths into the builder's FeaturesDict.
_FEATURE_KEYS = (("image",), ("image/id",), ("objects", "bbox"),
                 ("objects", "label"), ("objects", "is_crowd"),
                 ("objects", "area"))
# Leading bytes of the formats tf.io.decode_image reads, as (offset, bytes).
_IMAGE_SIGNATURES = (((0, b"\xff\xd8\xff"),), ((0, b"\x89PNG"),),
                     ((0, b"GIF"),), ((0, b"BM"),),
                     ((0, b"RIFF"), (8, b"WEBP")), ((0, b"\xff\x0a"),),
                     ((0, b"\x00\x00\x00\x0cJXL "),))
_ASSERTION = "assertion failed: ["


def error_line(error: tf.errors.OpError, context: str) -> str:
    """One line for a TensorFlow error raised while reading records.

    A failed assertion of this module gives its own message; any other
    error gives `context: <the error's first line>`.
    """
    line = (error.message or str(error)).strip().splitlines()[0]
    if _ASSERTION in line:
        line = line.split(_ASSERTION, 1)[1]
        return line[:-1] if line.endswith("]") else line
    return f"{context}: {line}"


def _check_features(name: str, features) -> list[str]:
    """Label names of a builder's features; ValueError names a missing key."""
    for path in _FEATURE_KEYS:
        node = features
        for part in path:
            try:
                node = node[part]
            except (KeyError, TypeError):
                node = None
                break
        if node is None:
            raise ValueError(
                    f"tfds {name}: features lack {'/'.join(path)!r} (the "
                    "source reads "
                    f"{', '.join('/'.join(p) for p in _FEATURE_KEYS)})")
    names = getattr(features["objects"]["label"], "names", None)
    if not names:
        raise ValueError(f"tfds {name}: feature 'objects/label' is not a "
                         "ClassLabel with class names")
    return list(names)


def _checked_image(record: dict, name: str) -> tf.Tensor:
    """The encoded image, asserted to start like a decodable image format."""
    data = record["image"]
    head = tf.strings.substr(data, 0, 16) + b"\x00" * 16

    def matches(signature) -> tf.Tensor:
        return tf.reduce_all([tf.strings.substr(head, at, len(magic)) == magic
                              for at, magic in signature])

    known = tf.reduce_any([matches(s) for s in _IMAGE_SIGNATURES])
    filename = record.get("image/filename", tf.constant("?"))
    message = tf.strings.join([
            f"tfds {name} record image/filename=", filename, " (image/id=",
            tf.strings.as_string(record["image/id"]), "): cannot decode its "
            "image: ", tf.strings.as_string(tf.strings.length(data)),
            " bytes in no known format (JPEG, PNG, GIF, BMP, WebP, JPEG XL)"])
    check = tf.debugging.Assert(known, [message])
    with tf.control_dependencies([check]):
        return tf.identity(data)


def _numpy_elements(dataset: tf.data.Dataset,
                    context: str) -> Iterator[dict]:
    """`dataset` as numpy; a TensorFlow error becomes one ValueError line."""
    iterator = dataset.as_numpy_iterator()
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            raise ValueError(error_line(e, context)) from None
        yield element


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
        self.label_names = _check_features(self.name,
                                           self.builder.info.features)
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

    def decode(self, record: dict, training: bool) -> dict:
        """Record -> example (image uint8, image_id; targets when training).

        Training targets drop crowd regions and zero-size boxes; classes are
        the TFDS labels + 1.
        """
        image = tf.io.decode_image(_checked_image(record, self.name),
                                   channels=3, expand_animations=False)
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
            image = _checked_image(record, self.name)
            shape = tf.cond(
                    tf.io.is_jpeg(image),
                    lambda: tf.image.extract_jpeg_shape(image)[:2],
                    lambda: tf.shape(tf.io.decode_image(
                            image, channels=3, expand_animations=False))[:2])
            return {"image/id": record["image/id"], "height": shape[0],
                    "width": shape[1], "objects": record["objects"]}

        source = f"tfds {self.name} {split}"
        return coco.tfds_ground_truth(
                _numpy_elements(dataset.map(header), source),
                self.label_names, source)
