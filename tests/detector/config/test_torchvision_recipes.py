"""configs/coco_r50_fpn.py's :torchvision and :torchvision_v2 training
settings: torchvision's reference recipes (docs/training.md, "Training
conventions"), valid as they stand."""

import pytest

from configs import coco_r50_fpn
from detector.imaging import canvases, resize
from detector.launch import validate


@pytest.mark.parametrize("variant", ["torchvision", "torchvision_v2"])
def test_the_variants_train_on_torchvisions_conventions(variant):
    config = coco_r50_fpn.get_config(variant)
    validate.validate(config)
    loss = config.model.loss
    assert loss.mask_target == "torchvision"
    assert loss.rpn_normaliser == "sampled"
    assert loss.box_beta == loss.rpn_box_beta == pytest.approx(1 / 9)
    assert config.model.rpn.post_nms_top_k_train == 2000
    assert config.train.weight_decay_on == "all"


def test_v2_trains_torchvisions_lsj_with_syncbn():
    config = coco_r50_fpn.get_config("torchvision_v2")
    model, data = config.model, config.data
    assert {
        model.norm,
        model.fpn_norm,
        model.roi.box_head_norm,
        model.roi.mask_head_norm,
    } == {"sync_batch"}
    assert data.augment == "lsj"
    assert canvases.training(data) == ((832, 832),)
    assert canvases.canvases(data) == ((1344, 1344),)  # evaluation's
    # Each end of torchvision's ScaleJitter (0.1, 2.0) x min(1024 / h,
    # 1024 / w), then its model's 1024 -> 800: the same scale here.
    for hw in ((480, 640), (640, 427), (100, 1000)):
        for jitter, theirs in ((data.lsj_min, 0.1), (data.lsj_max, 2.0)):
            options = resize.Options(jitter=jitter)
            ours, _ = resize.scale_and_size(
                "letterbox", hw, data.train_image_size, options
            )
            expected = theirs * min(1024 / hw[0], 1024 / hw[1]) * 800 / 1024
            assert ours == pytest.approx(expected, rel=1e-6)
