"""Batch files: the round trip, the shape check and the bad-file errors."""

import numpy as np
import pytest

from benchmarks import batch_file
from configs import coco_r50_fpn
from detector import config as config_lib


def _config(batch=2, size=(32, 48), instances=3, mask=8):
    config = config_lib.base_config()
    config.train.batch_size = batch
    config.data.image_size = size
    config.data.max_instances = instances
    config.data.gt_mask_size = mask
    return config


def _batches(config, count, seed=0):
    """Random pipeline-like batches of the config's shapes."""
    rng = np.random.default_rng(seed)
    shapes = batch_file.expected_shapes(config)
    mean = np.asarray(config.data.pixel_mean, np.float32)
    std = np.asarray(config.data.pixel_std, np.float32)
    batches = []
    for _ in range(count):
        pixels = rng.uniform(0.0, 255.0, shapes["image"]).astype(np.float32)
        batches.append(
            {
                "image": (pixels - mean) / std,
                "image_size": rng.integers(
                    1, 32, shapes["image_size"], np.int32
                ),
                "boxes": rng.uniform(0, 30, shapes["boxes"]).astype(np.float32),
                "classes": rng.integers(0, 4, shapes["classes"], np.int32),
                "valid": rng.random(shapes["valid"]) < 0.5,
                "masks": rng.integers(0, 2, shapes["masks"], np.uint8),
                "mask_valid": rng.random(shapes["mask_valid"]) < 0.5,
                "image_id": np.arange(shapes["image"][0]),  # not a model input
            }
        )
    return batches


def test_round_trip_keeps_targets_and_images_within_half_a_grey_level(tmp_path):
    config = _config()
    batches = _batches(config, 3)
    path = batch_file.save(tmp_path / "b.npz", batches, config.data)
    loaded = batch_file.load(path)
    assert len(loaded) == 3
    batch_file.check_shapes(loaded, config, path)
    half_level = 0.5 / np.asarray(config.data.pixel_std) + 1e-6
    for want, got in zip(batches, loaded, strict=True):
        assert "image_id" not in got
        for key in ("boxes", "classes", "valid", "masks", "mask_valid"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
            assert got[key].dtype == want[key].dtype
        assert got["image"].dtype == np.float32
        assert np.all(np.abs(got["image"] - want["image"]) <= half_level)


def test_shape_mismatch_names_the_file_and_the_entry(tmp_path):
    config = _config()
    path = batch_file.save(tmp_path / "b.npz", _batches(config, 1), config.data)
    other = _config(size=(64, 64))
    with pytest.raises(
        ValueError,
        match=r"b\.npz: batch 0 is on a 32 x 48 canvas, the config's are "
        r"\[\(64, 64\)\]",
    ):
        batch_file.check_shapes(batch_file.load(path), other, path)
    more = _config(instances=5)
    with pytest.raises(
        ValueError,
        match=r"b\.npz: boxes has shape \(2, 3, 4\), the config's pipeline "
        r"makes \(2, 5, 4\)",
    ):
        batch_file.check_shapes(batch_file.load(path), more, path)


def test_a_file_that_is_not_a_batch_file_is_one_clear_error(tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(2))
    with pytest.raises(
        ValueError,
        match=r"other\.npz: not a batch file of "
        r"this project \(missing format",
    ):
        batch_file.load(other)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(ValueError, match=r"text\.npz: not a batch file"):
        batch_file.load(text)
    with pytest.raises(FileNotFoundError):
        batch_file.load(tmp_path / "missing.npz")


def test_coco_sized_shapes_variant_keeps_the_model_and_reads_shapes():
    config = coco_r50_fpn.get_config("shapes")
    full = coco_r50_fpn.get_config()
    # The full R50-FPN, unchanged, started from random weights (no file).
    assert config.model.backbone_init == ""
    config.model.backbone_init = full.model.backbone_init
    assert config.model == full.model
    assert tuple(config.data.image_size) == (1024, 1024)
    assert config.train.batch_size == 8
    assert (config.data.source, config.data.num_classes) == ("shapes", 3)
    with pytest.raises(ValueError, match="known: .*runlocal, shapes"):
        coco_r50_fpn.get_config("huge")


def test_batches_on_both_orientation_canvases_round_trip(tmp_path):
    config = _config(size=(32, 64))
    config.data.resize = "shortest_edge"
    config.data.group_orientations = True
    landscape = _batches(config, 2)
    portrait = [
        dict(b, image=np.ascontiguousarray(b["image"].swapaxes(1, 2)))
        for b in _batches(config, 1, seed=1)
    ]
    batches = [landscape[0], portrait[0], landscape[1]]
    path = batch_file.save(tmp_path / "b.npz", batches, config.data)
    loaded = batch_file.load(path)
    batch_file.check_shapes(loaded, config, path)
    half_level = 0.5 / np.asarray(config.data.pixel_std) + 1e-6
    for want, got in zip(batches, loaded, strict=True):
        assert got["image"].shape == want["image"].shape
        assert np.all(np.abs(got["image"] - want["image"]) <= half_level)
    config.data.group_orientations = False
    with pytest.raises(ValueError, match=r"batch 1 is on a 64 x 32 canvas"):
        batch_file.check_shapes(loaded, config, path)
