"""imaging/image_file.py: 16-bit and 32-bit samples, in a folder too."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from detector.data import coco_folder
from detector.imaging import image_file
from tests.detector.data import helpers


def _sixteen_bit_png(path, samples: np.ndarray) -> None:
    path.write_bytes(tf.io.encode_png(samples).numpy())


@pytest.mark.parametrize("channels", [1, 3])
def test_sixteen_bit_png_keeps_the_high_byte(tmp_path, channels):
    """16-bit samples read as v >> 8, as TensorFlow's PNG decoder does."""
    values = np.array([0, 255, 256, 32896, 40000, 65535], np.uint16)
    samples = np.repeat(values.reshape(1, 6, 1), channels, axis=-1)
    path = tmp_path / "deep.png"
    _sixteen_bit_png(path, samples)
    decoded = image_file.read_rgb(str(path))
    want = (values >> 8).astype(np.uint8)
    assert decoded.pixels.dtype == np.uint8
    np.testing.assert_array_equal(decoded.pixels[0], np.stack([want] * 3, -1))
    tf_pixels = tf.io.decode_image(path.read_bytes(), channels=3).numpy()
    np.testing.assert_array_equal(decoded.pixels, tf_pixels)


def test_thirty_two_bit_image_is_refused_in_one_line(tmp_path):
    path = tmp_path / "deep.tif"
    Image.fromarray(np.full((4, 5), 70000, np.int32), mode="I").save(path)
    with pytest.raises(ValueError) as error:
        image_file.read_rgb(str(path))
    assert str(error.value) == (
        f"{path}: 32-bit integer samples (PIL mode 'I') have no 8-bit "
        "reading; convert the image to 8 or 16 bits per sample"
    )


def test_sixteen_bit_png_in_a_coco_folder(tmp_path):
    root = tmp_path
    helpers.write_colour_coded(str(root), "val", 3, 48, 60, seed=4)
    ramp = (np.arange(48 * 60, dtype=np.uint32) * 22).astype(np.uint16)
    _sixteen_bit_png(root / "val" / "0002.png", ramp.reshape(48, 60, 1))
    folder = coco_folder.CocoFolder(str(root), "val", 3)
    image = folder.load_example(1)[0]
    assert folder.error is None
    np.testing.assert_array_equal(image[..., 1], (ramp >> 8).reshape(48, 60))


def test_read_header_gives_the_turned_size_without_decoding(tmp_path):
    path = tmp_path / "phone.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 clockwise: 40 x 24 stored, 24 x 40 turned
    Image.new("RGB", (40, 24)).save(path, exif=exif)
    header = image_file.read_header(str(path))
    assert (header.orientation, header.stored_size, header.size) == (
        6,
        (40, 24),
        (40, 24),
    )
    path.write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"phone.jpg: cannot decode image"):
        image_file.read_header(str(path))


def _photo(path, fmt: str) -> bytes:
    pixels = (np.random.default_rng(0).random((60, 80, 3)) * 255).astype(
        np.uint8
    )
    Image.fromarray(pixels).save(path, format=fmt)
    return path.read_bytes()


@pytest.mark.parametrize("fmt, name", [("JPEG", "a.jpg"), ("PNG", "a.png")])
def test_a_file_cut_short_is_found_without_decoding_the_whole(
    tmp_path, fmt, name
):
    path = tmp_path / name
    data = _photo(path, fmt)
    image_file.check_complete(str(path))
    path.write_bytes(data[: len(data) // 2])
    image_file.read_header(str(path))  # the header alone still reads
    with pytest.raises(ValueError) as info:
        image_file.check_complete(str(path))
    assert str(info.value).startswith(f"{path}: cannot decode image (")
    assert str(info.value).endswith(
        ": the file is cut short or damaged; copy it again or remove its record"
    )


def test_a_jpeg_with_a_trailer_after_its_end_is_complete(tmp_path):
    """A motion photo's video after the JPEG's end: decoded to tell."""
    path = tmp_path / "motion.jpg"
    data = _photo(path, "JPEG")
    path.write_bytes(data + b"\0" * 1000 + b"ftypmp42 a video")
    image_file.check_complete(str(path))
