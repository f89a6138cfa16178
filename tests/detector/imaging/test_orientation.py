"""EXIF orientation: one table, applied by the COCO folder and TFDS alike."""

import io
import json
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image, ImageOps

from detector.data import coco_folder, eval_split
from detector.data.sources import tfds as tfds_coco
from detector.imaging import orientation
from tests.detector.data import helpers

# Stored pixels: 24 rows x 40 columns, a red block in the top-left corner
# and a green one in the bottom-left corner (every orientation differs).
STORED_HW = (24, 40)


def _stored() -> np.ndarray:
    pixels = np.zeros((*STORED_HW, 3), np.uint8)
    pixels[:8, :16] = (255, 0, 0)
    pixels[16:, :16] = (0, 255, 0)
    return pixels


def _encoded(pixels: np.ndarray, value: int, fmt: str = "JPEG") -> bytes:
    """`pixels` encoded with EXIF orientation `value`."""
    exif = Image.Exif()
    exif[orientation.ORIENTATION_TAG] = value
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, exif=exif, quality=95)
    return out.getvalue()


def _pil_turned(pixels: np.ndarray, value: int) -> np.ndarray:
    """PIL's own reading of the orientation (what detectron2 applies)."""
    image = Image.open(io.BytesIO(_encoded(pixels, value, "PNG")))
    return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


@pytest.mark.parametrize("value", range(1, 9))
def test_table_matches_pil_in_numpy_and_tensorflow(value):
    stored = _stored()
    want = _pil_turned(stored, value)
    np.testing.assert_array_equal(orientation.orient(stored, value), want)
    got = orientation.orient_tf(tf.constant(stored), tf.constant(value))
    np.testing.assert_array_equal(got.numpy(), want)
    assert orientation.oriented_size(*STORED_HW, value) == want.shape[:2]
    size = orientation.oriented_size_tf(tf.constant(STORED_HW), value)
    assert tuple(size.numpy()) == want.shape[:2]
    assert orientation.of_bytes(_encoded(stored, value)) == value


def test_the_pure_part_imports_without_tensorflow():
    code = (
        "import sys; from detector.imaging import orientation; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_missing_or_bad_tags_read_as_stored():
    plain = io.BytesIO()
    Image.fromarray(_stored()).save(plain, "JPEG")
    assert orientation.of_bytes(plain.getvalue()) == 1
    assert orientation.of_bytes(_encoded(_stored(), 9)) == 1
    assert orientation.of_bytes(b"not an image") == 1
    np.testing.assert_array_equal(orientation.orient(_stored(), 0), _stored())
    tensor = orientation.orient_tf(tf.constant(_stored()), tf.constant(12))
    np.testing.assert_array_equal(tensor.numpy(), _stored())


def _folder_with(root, value: int, json_hw: tuple[int, int]) -> str:
    """A one-image COCO folder: the stored image with orientation `value`.

    One annotation boxes the red block where it is once turned; the JSON
    gives the image size `json_hw` (height, width).
    """
    turned = orientation.orient(_stored(), value)
    rows, cols = np.nonzero(turned[..., 0] > 128)
    box = [
        int(cols.min()),
        int(rows.min()),
        int(cols.max() + 1 - cols.min()),
        int(rows.max() + 1 - rows.min()),
    ]
    path = helpers.write_folder(
        str(root),
        "phone",
        [turned],
        [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": box,
                "area": box[2] * box[3],
                "iscrowd": 0,
            }
        ],
    )
    # Replace the written PNG with the stored pixels and the EXIF tag.
    (root / "phone" / "0001.png").write_bytes(_encoded(_stored(), value, "PNG"))
    with open(path) as f:
        dataset = json.load(f)
    dataset["images"][0].update(height=json_hw[0], width=json_hw[1])
    with open(path, "w") as f:
        json.dump(dataset, f)
    return path


def test_coco_folder_reads_phone_photos_turned(tmp_path):
    # Rotate 90 clockwise: annotated on the turned 40 x 24 image.
    _folder_with(tmp_path, 6, json_hw=(40, 24))
    folder = coco_folder.CocoFolder(str(tmp_path), "phone", 3)
    image, boxes, *_ = folder.load_example(0)
    np.testing.assert_array_equal(image, orientation.orient(_stored(), 6))
    x1, y1, x2, y2 = boxes[0].astype(int)
    assert (image[y1:y2, x1:x2] == (255, 0, 0)).all()  # the red block


def test_size_mismatch_names_the_orientation(tmp_path):
    _folder_with(tmp_path, 8, json_hw=STORED_HW)  # the stored size
    with pytest.raises(ValueError) as info:  # from the header, at once
        coco_folder.CocoFolder(str(tmp_path), "phone", 3)
    assert str(info.value).endswith(
        "0001.png: image is 24x40 after its EXIF orientation 8 (stored "
        "40x24; annotations are read in the turned image, as COCO's tools "
        f"and detectron2 do) but {tmp_path}/annotations/"
        "instances_phone.json says 40x24"
    )


def test_tfds_decode_turns_the_image():
    """Train and eval decoding of a TFDS record apply the orientation."""
    record = {
        "image": tf.constant(_encoded(_stored(), 6)),
        "image/id": tf.constant(5, tf.int64),
        "objects": {
            "bbox": tf.zeros([0, 4]),
            "label": tf.zeros([0], tf.int64),
            "is_crowd": tf.zeros([0], tf.bool),
        },
    }
    builder = types.SimpleNamespace(name="coco/2017")
    for training in (False, True):
        image = tfds_coco.TfdsCoco.decode(builder, record, training)["image"]
        want = orientation.orient(_stored(), 6).astype(int)
        assert image.shape == want.shape
        assert np.abs(image.numpy().astype(int) - want).mean() < 8  # JPEG


def test_tfds_eval_split_sizes_and_pixels_are_turned(tmp_path):
    """Through tfds mock_data: ground truth and eval batches are turned."""
    record = {
        "image": _encoded(_stored(), 6),
        "image/filename": "phone.jpg",
        "image/id": np.int64(7),
        "objects": {
            "id": np.zeros([1], np.int64),
            "area": np.full([1], 128, np.int64),
            "bbox": np.array([[0.0, 0.6, 0.4, 1.0]], np.float32),
            "label": np.zeros([1], np.int64),
            "is_crowd": np.zeros([1], bool),
        },
    }

    def as_dataset(self, split, decoders=None, **kwargs):
        del self, split, decoders, kwargs
        return tf.data.Dataset.from_tensors(record)

    config = helpers.small_config("", source="tfds")
    config.data.tfds_data_dir = str(tmp_path)
    config.data.num_classes = 80
    config.data.eval_split = "validation"
    config.eval.batch_size = 1
    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        split = eval_split.eval_split(config)
        batch = next(split.batches())
    (image,) = split.coco.dataset["images"]
    assert (image["height"], image["width"]) == (40, 24)
    assert batch["orig_size"][0].tolist() == [40, 24]
    (annotation,) = split.coco.dataset["annotations"]
    np.testing.assert_allclose(annotation["bbox"], [14.4, 0.0, 9.6, 16.0])
