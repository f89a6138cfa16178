"""Reading image files of any mode, and the letterbox against eval's."""

import numpy as np
import pytest
from PIL import Image

from detector.runtime import images

SIZE = (128, 128)


def _picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)


@pytest.mark.parametrize("hw", [(97, 203), (300, 150), (128, 128), (40, 61)])
def test_letterbox_is_the_eval_pipelines(hw):
    """The numpy letterbox, normalised, equals the eval transform's input
    (detector/data/transforms.py) exactly on CPU; its uint8 form is that
    resize rounded."""
    tf = pytest.importorskip("tensorflow")
    from configs import shapes
    from detector.data import transforms

    data = shapes.get_config().data
    picture = _picture(*hw)
    expected = transforms.transform(
        {"image": tf.constant(picture), "image_id": tf.constant(1, tf.int64)},
        None,
        data,
        training=False,
        has_masks=False,
    )["image"].numpy()
    resized = images.resize_bilinear(picture, images.letterbox_size(hw, SIZE))
    mean, std = np.asarray(data.pixel_mean), np.asarray(data.pixel_std)
    ours = np.zeros_like(expected)
    rows, cols = resized.shape[:2]
    ours[:rows, :cols] = (resized - mean.astype(np.float32)) / std.astype(
        np.float32
    )
    np.testing.assert_array_equal(ours, expected)
    boxed = images.letterbox(picture, SIZE)
    np.testing.assert_array_equal(
        boxed[:rows, :cols], np.round(resized).astype(np.uint8)
    )
    assert not boxed[rows:].any() and not boxed[:, cols:].any()


def test_reads_every_mode_as_rgb(tmp_path):
    rgb = _picture(20, 30)
    gray = rgb[..., 0]
    Image.fromarray(gray).save(tmp_path / "gray.png")
    rgba = np.concatenate([rgb, np.full((20, 30, 1), 7, np.uint8)], axis=-1)
    Image.fromarray(rgba).save(tmp_path / "rgba.png")
    wide = (gray.astype(np.uint16) * 257).astype(np.uint16)
    Image.fromarray(wide).save(tmp_path / "wide.png")  # mode I;16
    Image.fromarray(rgb).convert("P").save(tmp_path / "palette.png")
    np.testing.assert_array_equal(
        images.read_image(tmp_path / "gray.png"), np.stack([gray] * 3, -1)
    )
    np.testing.assert_array_equal(images.read_image(tmp_path / "rgba.png"), rgb)
    np.testing.assert_array_equal(
        images.read_image(tmp_path / "wide.png"), np.stack([gray] * 3, -1)
    )
    palette = images.read_image(tmp_path / "palette.png")
    assert palette.shape == (20, 30, 3) and palette.dtype == np.uint8


def test_exif_orientation_is_applied(tmp_path):
    """A JPEG stored 20 x 30 with EXIF orientation 6 (rotate 90 degrees
    clockwise to display) reads as 30 x 20, its left column on top."""
    picture = np.zeros((20, 30, 3), np.uint8)
    picture[:, :5] = 255  # a white band on the stored left
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(picture).save(tmp_path / "rotated.jpg", exif=exif)
    read = images.read_image(tmp_path / "rotated.jpg")
    assert read.shape == (30, 20, 3)
    assert read[:5].mean() > 200 and read[10:].mean() < 50


@pytest.mark.parametrize("content", [b"", b"not an image", b"\x89PNG\r\n"])
def test_unreadable_file_is_one_line(tmp_path, content):
    path = tmp_path / "broken.png"
    path.write_bytes(content)
    with pytest.raises(images.ImageReadError) as error:
        images.read_image(path)
    message = str(error.value)
    assert message.startswith(f"{path}: cannot decode image (")
    assert "\n" not in message


def test_truncated_jpeg_is_one_line(tmp_path):
    path = tmp_path / "cut.jpg"
    Image.fromarray(_picture(64, 64)).save(path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(
        images.ImageReadError, match="cut.jpg: cannot decode image"
    ):
        images.read_image(path)
