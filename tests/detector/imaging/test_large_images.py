"""predict's reading of large images: the --max_pixels refusal, Pillow's
guard replaced by it, and JPEGs decoded at reduced size (Image.draft), as
evaluation decodes them too."""

import warnings

import numpy as np
import pytest
from PIL import Image

from detector.imaging import image_file, images

# The draft decode is JPEG's DCT scaling, not a bilinear resize of the
# full decode, so the two cannot agree to the 1e-3 of
# test_images.py's resize tests; on a smooth photo-like image they agree
# to about half a grey level on average and a few levels at most.
MEAN_TOLERANCE, MAX_TOLERANCE = 1.0, 8.0


def _smooth(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like picture: random colours, bicubic-smoothed."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (h // 64 + 2, w // 64 + 2, 3), np.uint8)
    return np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC))


def test_an_image_over_max_pixels_is_one_line(tmp_path):
    path = tmp_path / "big.png"
    Image.fromarray(_smooth(30, 40)).save(path)
    with pytest.raises(images.ImageReadError) as error:
        images.read_decoded(path, max_pixels=1000)
    assert str(error.value) == (
        f"{path}: 40 x 30 = 1200 pixels, over --max_pixels=1000; raise "
        "--max_pixels to read it (0: no limit)"
    )
    assert images.read_decoded(path, max_pixels=1200).pixels.shape == (
        30,
        40,
        3,
    )


@pytest.mark.parametrize("max_pixels", [0, 5000])
def test_pillows_guard_gives_way_to_max_pixels(
    tmp_path, monkeypatch, max_pixels
):
    """Over Pillow's own limit (here 1000 pixels) but within --max_pixels
    (or with 0, no limit): read, with no DecompressionBombWarning."""
    path = tmp_path / "big.jpg"
    Image.fromarray(_smooth(60, 40)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decoded = images.read_decoded(path, max_pixels=max_pixels)
    assert decoded.pixels.shape == (60, 40, 3)
    assert Image.MAX_IMAGE_PIXELS == 1000  # restored
    with pytest.raises(ValueError, match="cannot decode image"):
        image_file.read_rgb(str(path))  # training's reading keeps Pillow's


@pytest.mark.parametrize(
    "hw, needed, drafted",
    [
        ((1200, 1600), (150, 200), (150, 200)),  # 1/8
        ((1200, 1600), (97, 130), (150, 200)),  # 1/8, the smallest >= needed
        ((1000, 700), (300, 210), (500, 350)),  # 1/2
        ((600, 800), (400, 500), (600, 800)),  # under 2x: full decode
    ],
)
def test_a_large_jpeg_is_decoded_reduced_as_resize_would_see_it(
    tmp_path, hw, needed, drafted
):
    path = tmp_path / "photo.jpg"
    Image.fromarray(_smooth(*hw)).save(path, quality=95)
    full = images.read_decoded(path).pixels
    decoded = images.read_decoded(path, needed=lambda size: needed)
    assert decoded.pixels.shape[:2] == drafted
    assert decoded.size == hw
    diff = np.abs(
        images.resize_bilinear(decoded.pixels, needed)
        - images.resize_bilinear(full, needed)
    )
    assert diff.mean() <= MEAN_TOLERANCE and diff.max() <= MAX_TOLERANCE


def test_the_draft_follows_the_exif_orientation(tmp_path):
    """Stored 1200 x 1600 (h x w), turned a quarter: read as 1600 x 1200."""
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(_smooth(1200, 1600)).save(path, exif=exif, quality=95)
    asked = []
    decoded = images.read_decoded(
        path, needed=lambda size: asked.append(size) or (200, 150)
    )
    assert asked == [(1600, 1200)]
    assert decoded.size == (1600, 1200)
    assert decoded.pixels.shape == (200, 150, 3)
