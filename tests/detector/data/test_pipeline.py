"""Tests of the tf.data pipelines on small COCO-format folders."""

import itertools
import pathlib
import time

import numpy as np
import pytest

from detector.data import eval_split, pipeline, shapes_dataset
from tests.detector.data import helpers

H, W, M, S = 64, 80, 4, 16
TRAIN_DTYPES = {
    "image": (np.float32, (H, W, 3)),
    "boxes": (np.float32, (M, 4)),
    "classes": (np.int32, (M,)),
    "valid": (np.bool_, (M,)),
    "masks": (np.uint8, (M, S, S)),
    "mask_valid": (np.bool_, (M,)),
    "image_id": (np.int64, ()),
    "orig_size": (np.int32, (2,)),
    "scale": (np.float32, ()),
    "image_size": (np.int32, (2,)),
    "image_valid": (np.bool_, ()),
}


@pytest.fixture(name="shapes_config", scope="module")
def shapes_config_fixture(shapes_root):
    return helpers.small_config(shapes_root, source="shapes")


@pytest.fixture(name="colour_config", scope="module")
def colour_config_fixture(tmp_path_factory):
    """Colour-coded 100x120 images into a 64x80 canvas, strong jitter."""
    root = str(tmp_path_factory.mktemp("colour"))
    helpers.write_colour_coded(root, "train", 8, 100, 120, seed=1)
    config = helpers.small_config(root)
    config.data.train_split = "train"
    config.data.pixel_mean = (0.0, 0.0, 0.0)
    config.data.pixel_std = (1.0, 1.0, 1.0)
    config.data.scale_jitter = (0.7, 1.8)
    return config


def _take(iterator, count):
    return list(itertools.islice(iterator, count))


@pytest.mark.parametrize("augment", ["jitter", "lsj"])
def test_train_batch_shapes_dtypes_and_padding(shapes_config, augment):
    config = shapes_config.copy_and_resolve_references()
    config.data.augment = augment
    for batch in _take(pipeline.train_batches(config), 3):
        assert set(batch) == set(TRAIN_DTYPES)
        for key, (dtype, shape) in TRAIN_DTYPES.items():
            assert batch[key].dtype == dtype, key
            assert batch[key].shape == (4,) + shape, key
        valid = batch["valid"]
        assert batch["image_valid"].all()
        # Valid rows come first; padding rows are all zero and invalid.
        assert (np.sort(valid, axis=1)[:, ::-1] == valid).all()
        assert (batch["boxes"][~valid] == 0).all()
        assert (batch["classes"][~valid] == 0).all()
        assert (batch["masks"][~valid] == 0).all()
        assert not batch["mask_valid"][~valid].any()
        assert set(np.unique(batch["classes"][valid])) <= {1, 2, 3}
        assert set(np.unique(batch["masks"])) <= {0, 1}
        boxes = batch["boxes"][valid]
        assert (boxes[:, 2:] > boxes[:, :2]).all()
        assert (boxes >= 0).all() and (boxes[:, 2] <= W).all()
        assert (boxes[:, 3] <= H).all()
        assert (batch["orig_size"] == 64).all()


def _paste(mask: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Nearest-neighbour paste of an SxS box mask onto the HxW canvas."""
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    x1, y1, x2, y2 = box
    inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
    rows = np.clip(((ys - y1) / (y2 - y1) * S).astype(int), 0, S - 1)
    cols = np.clip(((xs - x1) / (x2 - x1) * S).astype(int), 0, S - 1)
    return inside & (mask[rows, cols] > 0)


def test_boxes_masks_and_pixels_stay_aligned(colour_config):
    """After flip, jitter and crop, box, mask and painted pixels agree."""
    cropped = 0
    orders = []  # per example: is class 1 (left third) right of class 3?
    for batch in _take(pipeline.train_batches(colour_config), 6):
        for i in range(4):
            image = batch["image"][i]
            scaled = batch["orig_size"][i] * batch["scale"][i]
            cropped += bool((scaled > [H, W]).any())
            centres = {
                int(c): b[0] + b[2]
                for c, b, v in zip(
                    batch["classes"][i],
                    batch["boxes"][i],
                    batch["valid"][i],
                    strict=True,
                )
                if v
            }
            if 1 in centres and 3 in centres:
                orders.append(centres[1] > centres[3])
            for k in np.flatnonzero(batch["valid"][i]):
                colour = helpers.CLASS_COLOURS[batch["classes"][i, k]]
                channel = int(np.argmax(colour))
                painted = image[..., channel] >= 127.5
                rows = np.flatnonzero(painted.any(axis=1))
                cols = np.flatnonzero(painted.any(axis=0))
                region = np.array(
                    [cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]
                )
                box = batch["boxes"][i, k]
                # The painted part lies in the box; an unclipped box is its
                # tight box (a clipped one may be looser: the crop keeps
                # the box's part of the frame, not the shape's).
                assert (region[:2] >= box[:2] - 1.01).all()
                assert (region[2:] <= box[2:] + 1.01).all()
                if (
                    (box[:2] > 0.5).all()
                    and box[2] < W - 0.5
                    and (box[3] < H - 0.5)
                ):
                    np.testing.assert_allclose(box, region, atol=1.01)
                pasted = _paste(batch["masks"][i, k], batch["boxes"][i, k])
                iou = (pasted & painted).sum() / (pasted | painted).sum()
                assert iou > 0.8, (i, k, iou)
                assert batch["mask_valid"][i, k]
    assert cropped > 0, "jitter never made the image exceed the canvas"
    # Class 1 is drawn left of class 3: flipped examples swap them, and the
    # checks above held for both kinds.
    assert any(orders) and not all(orders), orders


def test_resume_gives_the_same_batches(shapes_config):
    full = _take(pipeline.train_batches(shapes_config), 5)
    resumed = _take(pipeline.train_batches(shapes_config, start_step=3), 2)
    for a, b in zip(full[3:], resumed, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # Steps 0..4 span an epoch boundary (12 images, 4 per step).
    assert len({int(i) for b in full for i in b["image_id"]}) == 12
    other = shapes_config.copy_and_resolve_references()
    other.seed = 1
    changed = next(pipeline.train_batches(other))
    assert not np.array_equal(changed["image"], full[0]["image"])


def test_processes_split_each_global_batch(shapes_config):
    single = _take(pipeline.train_batches(shapes_config, start_step=1), 2)
    halves = [
        _take(
            pipeline.train_batches(
                shapes_config, start_step=1, process_index=p, process_count=2
            ),
            2,
        )
        for p in range(2)
    ]
    for step in range(2):
        for key in single[step]:
            joined = np.concatenate(
                [halves[0][step][key], halves[1][step][key]]
            )
            np.testing.assert_array_equal(
                joined, single[step][key], err_msg=key
            )


def test_eval_split_pads_the_last_batch(shapes_config):
    split = eval_split.eval_split(shapes_config)
    assert split.has_masks and split.category_ids == [1, 2, 3]
    assert split.image_ids == [1, 2, 3, 4, 5] == sorted(split.coco.imgs)
    batches = list(split.batches())
    assert len(batches) == split.num_batches == 3
    last = batches[-1]
    assert last["image_valid"].tolist() == [True, False]
    assert last["image_id"].tolist() == [5, -1]
    assert (last["image"][1] == 0).all()
    ids = np.concatenate([b["image_id"] for b in batches])
    assert ids[ids >= 0].tolist() == split.image_ids
    first = batches[0]
    assert first["image"].shape == (2, H, W, 3)
    # 64x64 fits 64x80 unscaled.
    assert first["image_size"].tolist() == first["orig_size"].tolist()
    assert first["image_size"].tolist() == [[64, 64], [64, 64]]
    # Padding sits at the bottom/right and is zero.
    assert (first["image"][:, :, 64:] == 0).all()
    assert not (first["image"][:, :, :64] == 0).all()
    # A second pass yields the same batches.
    again = next(split.batches())
    np.testing.assert_array_equal(again["image"], first["image"])


def test_eval_split_slicing_and_processes(shapes_config):
    split = eval_split.eval_split(shapes_config, "val[1:]", max_images=3)
    assert split.image_ids == [2, 3, 4]
    assert sorted(split.coco.imgs) == [2, 3, 4]
    assert all(a["image_id"] in (2, 3, 4) for a in split.coco.anns.values())
    percent = eval_split.eval_split(shapes_config, "val[:40%]")
    assert percent.image_ids == [1, 2]
    parts = [
        eval_split.eval_split(shapes_config, process_index=p, process_count=2)
        for p in range(2)
    ]
    assert [p.image_ids for p in parts] == [[1, 2, 3], [4, 5]]
    # eval.batch_size 2 over 2 processes: 1 image per batch and process;
    # both processes run the same number of batches.
    assert [p.num_batches for p in parts] == [3, 3]
    assert sorted(parts[1].coco.imgs) == [1, 2, 3, 4, 5]
    ids = [int(i) for b in parts[1].batches() for i in b["image_id"]]
    assert ids == [4, 5, -1]


def test_cache_gives_identical_batches(shapes_config):
    cached = shapes_config.copy_and_resolve_references()
    cached.data.cache = True
    plain = _take(pipeline.train_batches(shapes_config), 4)
    iterator = pipeline.train_batches(cached)
    # 4 steps > one epoch
    for a, b in zip(plain, _take(iterator, 4), strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_max_instances_truncation_is_logged(shapes_config, caplog):
    config = shapes_config.copy_and_resolve_references()
    config.data.max_instances = 1
    config.data.hflip = False
    config.data.scale_jitter = (1.0, 1.0)
    with caplog.at_level("WARNING"):
        batches = _take(pipeline.train_batches(config), 3)
    assert all(b["boxes"].shape == (4, 1, 4) for b in batches)
    assert "> data.max_instances=1; keeping the 1 largest" in caplog.text


def test_ensure_shapes_dataset_writes_when_missing_or_stale(tmp_path):
    config = helpers.small_config(str(tmp_path), source="shapes")
    config.data.shapes.num_train, config.data.shapes.num_val = 3, 2
    pipeline.prepare(config)
    train_json = tmp_path / "annotations" / "instances_train.json"
    written = train_json.stat().st_mtime_ns
    pipeline.prepare(config)  # current: left alone
    assert train_json.stat().st_mtime_ns == written
    config.data.shapes.num_train = 4
    pipeline.prepare(config)  # stale: rewritten
    assert len(list((tmp_path / "train").glob("*.png"))) == 4
    assert eval_split.eval_split(config).image_ids == [1, 2]
    config.data.source = "coco_json"  # only the shapes source writes
    config.data.root = str(tmp_path / "elsewhere")
    pipeline.prepare(config)
    assert not (tmp_path / "elsewhere").exists()


def test_ensure_shapes_dataset_refuses_a_foreign_json(tmp_path):
    config = helpers.small_config(str(tmp_path), source="shapes")
    config.data.shapes.num_train, config.data.shapes.num_val = 2, 1
    path = helpers.write_folder(
        str(tmp_path), "val", [np.zeros((8, 8, 3), np.uint8)], []
    )
    before = pathlib.Path(path).read_text()
    with pytest.raises(
        ValueError,
        match=rf"^{path}: exists and its 'info' "
        "does not name it a 'flax-maskrcnn synthetic shapes' "
        "file; refusing to overwrite it",
    ):
        pipeline.prepare(config)
    assert pathlib.Path(path).read_text() == before
    # Nothing was written, the other split included.
    assert not (tmp_path / "annotations" / "instances_train.json").exists()
    with pytest.raises(ValueError, match=r"instances_val.json: exists"):
        pipeline.train_batches(config)


def test_ensure_shapes_dataset_other_processes_wait(tmp_path):
    config = helpers.small_config(str(tmp_path), source="shapes")
    config.data.shapes.num_train, config.data.shapes.num_val = 2, 1
    with pytest.raises(
        TimeoutError,
        match=r"instances_train.json: process 0 "
        r"did not write the shapes train split within 0.2 s$",
    ):
        shapes_dataset.ensure_dataset(config, process_index=1, timeout_s=0.2)
    assert not (tmp_path / "train").exists()  # only process 0 writes
    shapes_dataset.ensure_dataset(config, process_index=0)
    started = time.monotonic()
    shapes_dataset.ensure_dataset(config, process_index=1, timeout_s=60)
    assert time.monotonic() - started < 5
    config.data.shapes.image_size = 16
    with pytest.raises(
        ValueError,
        match=r"^data.shapes.image_size=16 is "
        "below the minimum 32$",
    ):
        pipeline.prepare(config)


def test_training_canvas_of_its_own(shapes_config):
    """data.train_image_size: the training batches (LSJ, torchvision's mask
    layout) on that canvas, the eval split on data.image_size."""
    config = shapes_config.copy_and_resolve_references()
    config.data.augment = "lsj"
    config.data.train_image_size = (96, 128)
    config.model.loss.mask_target = "torchvision"
    batches = pipeline.train_batches(config)
    assert batches.canvases == ((96, 128),)
    for batch in _take(batches, 2):
        assert batch["image"].shape == (4, 96, 128, 3)
        assert batch["masks"].shape == (4, M, 96, 16)
        assert (batch["image_size"] <= [96, 128]).all()
    split = eval_split.eval_split(config, max_images=4)
    assert split.canvases == ((H, W),)
    assert next(split.batches())["image"].shape[1:3] == (H, W)
