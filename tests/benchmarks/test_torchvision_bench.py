"""torchvision_bench.py: torchvision's model with our settings, timed on a
tiny batch; a one-line error where torch is missing."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import torchvision_bench
from configs import coco_r50_fpn
from tests.helpers import torch_process

_REPO = pathlib.Path(__file__).resolve().parents[2]
_SCRIPT = _REPO / "benchmarks" / "torchvision_bench.py"


def test_missing_torch_is_one_line_naming_the_extra():
    blocked = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = ['torchvision_bench.py', '--batches=x.npz']; "
        f"runpy.run_path({str(_SCRIPT)!r}, run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked],
        capture_output=True,
        text=True,
        cwd=_REPO,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "torch" in lines[0] and ".[torch]" in lines[0]


def _config():
    config = coco_r50_fpn.get_config("shapes,runlocal")
    rpn = config.model.rpn
    rpn.pre_nms_top_k_train = rpn.pre_nms_top_k_test = 64
    rpn.post_nms_top_k_train = rpn.post_nms_top_k_test = 32
    config.model.roi.num_rois = 16
    config.model.detection.max_detections = 5
    return config


def _batch(rng, canvas=64, size=8):
    """Two images (48 x 40 and the whole canvas) with two instances each
    (the second padding), masks all ones."""
    boxes = np.zeros((2, 2, 4), np.float32)
    boxes[:, 0] = [4, 6, 30, 40]
    return {
        "image": rng.normal(size=(2, canvas, canvas, 3)).astype(np.float32),
        "image_size": np.array([[48, 40], [canvas, canvas]], np.int32),
        "boxes": boxes,
        "classes": np.array([[2, 0], [3, 0]], np.int32),
        "valid": np.array([[True, False], [True, False]]),
        "masks": np.ones((2, 2, size, size), np.uint8),
        "mask_valid": np.array([[True, False], [True, False]]),
    }


@torch_process.imports_torch
def test_targets_paste_masks_over_boxes_and_own_resize_crops():
    import torch

    batch = _batch(np.random.default_rng(0))
    cpu = torch.device("cpu")
    images, targets = torchvision_bench.to_inputs(batch, cpu, own_resize=True)
    assert [tuple(x.shape) for x in images] == [(3, 48, 40), (3, 64, 64)]
    np.testing.assert_array_equal(
        images[0].numpy(), batch["image"][0, :48, :40].transpose(2, 0, 1)
    )
    first = targets[0]
    assert first["labels"].tolist() == [2]  # the padding row is dropped
    mask = first["masks"][0].numpy()
    assert mask.shape == (48, 40)
    assert mask.sum() == mask[6:40, 4:30].sum() == 26 * 34
    # Boxes are clipped to the image's own extent (40 wide, 48 high).
    np.testing.assert_array_equal(first["boxes"].numpy(), [[4, 6, 30, 40]])
    _, canvas = torchvision_bench.to_inputs(batch, cpu, own_resize=False)
    assert canvas[0]["masks"].shape == (1, 64, 64)


@torch_process.imports_torch
def test_model_takes_our_settings():
    config = _config()
    model = torchvision_bench.build_model(config, (64, 64))
    body = model.backbone.body
    assert not any(p.requires_grad for p in body.conv1.parameters())
    assert not any(p.requires_grad for p in body.layer1.parameters())
    assert all(p.requires_grad for p in body.layer2.parameters())
    assert type(body.bn1).__name__ == "FrozenBatchNorm2d"
    assert model.roi_heads.box_predictor.cls_score.out_features == 4
    assert model.roi_heads.fg_bg_sampler.batch_size_per_image == 16
    assert model.roi_heads.detections_per_img == 5
    assert model.rpn._pre_nms_top_n == {"training": 64, "testing": 64}
    assert model.rpn._post_nms_top_n == {"training": 32, "testing": 32}
    assert model.transform.min_size == (64,)
    assert model.transform.max_size == 64


@torch_process.imports_torch
@pytest.mark.parametrize("own_resize", [False, True])
def test_run_times_a_train_step_and_predict(monkeypatch, own_resize):
    monkeypatch.setattr(torchvision_bench, "OWN_MIN_SIZE", 64)
    monkeypatch.setattr(torchvision_bench, "OWN_MAX_SIZE", 96)
    result = torchvision_bench.run(
        _config(),
        [_batch(np.random.default_rng(1))],
        steps=2,
        warmup=1,
        own_resize=own_resize,
        device="cpu",
    )
    assert result["autocast"] == "off (float32)"
    assert result["transform_size"] == ([64, 96] if own_resize else [64, 64])
    train, predict = result["train"], result["predict"]
    assert 0 < train["median_ms"] <= train["p90_ms"]
    assert train["images_per_sec"] == pytest.approx(2e3 / train["median_ms"])
    assert np.isfinite(train["final_total_loss"])
    assert predict["ms_per_image"] == pytest.approx(predict["median_ms"] / 2)


def test_ratio_is_ours_over_torchvision(tmp_path):
    path = tmp_path / "step_bench.json"
    path.write_text(
        '{"batch_size": 2, "results": {"pallas": {"median_ms": 50}}}'
    )
    ours = torchvision_bench.load_ours(str(path), 2)
    assert torchvision_bench.ratios(ours, {"train": {"median_ms": 100}}) == {
        "pallas": 0.5
    }
    with pytest.raises(ValueError, match="--ours=.*batch 2.*is 8"):
        torchvision_bench.load_ours(str(path), 8)
