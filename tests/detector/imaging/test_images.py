"""Reading image files of any mode, and the resize rules against eval's
and torchvision's."""

import numpy as np
import pytest
from PIL import Image

from detector.imaging import images, resize
from tests.helpers import torch_process

SIZE = (128, 128)


def _picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)


def _shapes_data():
    from configs import shapes

    return shapes.get_config().data


def _eval_input(picture: np.ndarray, data) -> dict:
    """The eval transform's example of `picture` (TensorFlow, numpy out)."""
    tf = pytest.importorskip("tensorflow")
    from detector.data import transforms

    out = transforms.transform(
        {"image": tf.constant(picture), "image_id": tf.constant(1, tf.int64)},
        None,
        data,
        training=False,
        masks=None,
    )
    return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("hw", [(97, 203), (300, 150), (128, 128), (40, 61)])
def test_letterbox_is_the_eval_pipelines(hw):
    """The numpy letterbox, normalised, equals the eval transform's input
    (detector/data/transforms.py) exactly on CPU."""
    data = _shapes_data()
    picture = _picture(*hw)
    expected = _eval_input(picture, data)["image"]
    resized = images.resize_bilinear(
        picture, images.fitted_size(hw, images.Resize("letterbox"), SIZE)
    )
    mean, std = np.asarray(data.pixel_mean), np.asarray(data.pixel_std)
    ours = np.zeros_like(expected)
    rows, cols = resized.shape[:2]
    ours[:rows, :cols] = (resized - mean.astype(np.float32)) / std.astype(
        np.float32
    )
    np.testing.assert_array_equal(ours, expected)
    placed = images.place(picture, (rows, cols), SIZE)
    np.testing.assert_array_equal(placed[:rows, :cols], resized)
    assert not placed[rows:].any() and not placed[:, cols:].any()


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
        images.read_decoded(tmp_path / "gray.png").pixels,
        np.stack([gray] * 3, -1),
    )
    np.testing.assert_array_equal(
        images.read_decoded(tmp_path / "rgba.png").pixels, rgb
    )
    np.testing.assert_array_equal(
        images.read_decoded(tmp_path / "wide.png").pixels,
        np.stack([gray] * 3, -1),
    )
    palette = images.read_decoded(tmp_path / "palette.png").pixels
    assert palette.shape == (20, 30, 3) and palette.dtype == np.uint8


def test_exif_orientation_is_applied(tmp_path):
    """A JPEG stored 20 x 30 with EXIF orientation 6 (rotate 90 degrees
    clockwise to display) reads as 30 x 20, its left column on top."""
    picture = np.zeros((20, 30, 3), np.uint8)
    picture[:, :5] = 255  # a white band on the stored left
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(picture).save(tmp_path / "rotated.jpg", exif=exif)
    read = images.read_decoded(tmp_path / "rotated.jpg").pixels
    assert read.shape == (30, 20, 3)
    assert read[:5].mean() > 200 and read[10:].mean() < 50


@pytest.mark.parametrize("content", [b"", b"not an image", b"\x89PNG\r\n"])
def test_unreadable_file_is_one_line(tmp_path, content):
    path = tmp_path / "broken.png"
    path.write_bytes(content)
    with pytest.raises(images.ImageReadError) as error:
        images.read_decoded(path)
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
        images.read_decoded(path)


# (h, w) -> torchvision's resized (h', w') at min_size 800, max_size 1333,
# as torch.nn.functional.interpolate(scale_factor=...,
# recompute_scale_factor=True) sizes its output (floor).
TORCHVISION_SIZES = {
    (480, 640): (800, 1066),
    (427, 640): (800, 1199),
    (640, 480): (1066, 800),
    (500, 375): (1066, 800),
    (333, 500): (800, 1201),
    (100, 1000): (133, 1333),
    (1000, 100): (1333, 133),
    (24, 31): (800, 1033),
}


@pytest.mark.parametrize("hw", sorted(TORCHVISION_SIZES))
def test_shortest_edge_size_is_torchvisions(hw):
    assert resize.shortest_edge_size(hw, 800, 1333) == TORCHVISION_SIZES[hw]


@torch_process.imports_torch
def test_shortest_edge_size_against_torch():
    """torch's own output size of the resize (where torch is installed),
    every size in one child process."""
    import torch

    for hw in sorted(TORCHVISION_SIZES):
        scale = min(800 / min(hw), 1333 / max(hw))
        out = torch.nn.functional.interpolate(
            torch.zeros(1, 1, *hw),
            scale_factor=scale,
            mode="bilinear",
            recompute_scale_factor=True,
            align_corners=False,
        )
        assert resize.shortest_edge_size(hw, 800, 1333) == tuple(
            out.shape[-2:]
        ), hw


@torch_process.imports_torch
def test_resize_bilinear_is_torchs_interpolate():
    """Float resize of uint8 pixels: torch's bilinear (align_corners=False,
    no antialias) to 1e-3 of 255 on CPU (float32 summation order)."""
    import torch

    picture = _picture(37, 53)
    size = resize.shortest_edge_size((37, 53), 800, 1333)
    ours = images.resize_bilinear(picture, size)
    theirs = torch.nn.functional.interpolate(
        torch.from_numpy(picture).permute(2, 0, 1)[None].float(),
        size=size,
        mode="bilinear",
        align_corners=False,
    )[0].permute(1, 2, 0)
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-3)


@pytest.mark.parametrize("hw", [(97, 203), (300, 150), (40, 61), (13, 17)])
def test_shortest_edge_place_is_the_eval_pipelines(hw):
    """The numpy float path (fitted_size, place), normalised, equals the
    eval transform's input under data.resize='shortest_edge' exactly on
    CPU."""
    data = _shapes_data()
    data.resize, data.min_size, data.max_size = "shortest_edge", (96,), 160
    picture = _picture(*hw)
    expected = _eval_input(picture, data)
    resize = images.Resize("shortest_edge", 96, 160)
    size = images.fitted_size(hw, resize, SIZE)
    assert size == tuple(expected["image_size"])
    placed = images.place(picture, size, SIZE)
    mean, std = np.asarray(data.pixel_mean), np.asarray(data.pixel_std)
    ours = (placed - mean.astype(np.float32)) / std.astype(np.float32)
    ours[size[0] :] = 0.0
    ours[:, size[1] :] = 0.0
    np.testing.assert_array_equal(ours, expected["image"])
