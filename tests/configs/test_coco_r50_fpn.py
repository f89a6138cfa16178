"""configs/coco_r50_fpn.py: the pretrained 1x recipe and its variants."""

import pytest

from configs import coco_r50_fpn
from detector.imaging import canvases, resize
from detector.launch.validate import validate
from detector.modeling import backbone
from detector.state import optimizer


def test_default_is_the_pretrained_1x_recipe():
    config = coco_r50_fpn.get_config()
    model, train = config.model, config.train
    assert (model.backbone, model.norm, model.freeze_at) == (
        "resnet50",
        "frozen_batch",
        2,
    )
    assert model.backbone_init.endswith(".safetensors")
    assert backbone.frozen_prefixes(model.backbone, model.freeze_at) == (
        "backbone/stem",
        "backbone/stages/0",
    )
    data = config.data
    assert (data.resize, data.max_size, data.hflip) == (
        "shortest_edge",
        1333,
        True,
    )
    assert data.min_size == (640, 672, 704, 736, 768, 800)
    # Landscape on 832 x 1344, portrait on 1344 x 832: each holds its
    # orientation's largest shortest-edge size, 800 x 1333.
    assert canvases.canvases(data) == ((832, 1344), (1344, 832))
    assert (train.optimizer, train.momentum, train.weight_decay) == (
        "sgd",
        0.9,
        1e-4,
    )
    assert (
        train.batch_size,
        train.learning_rate,
        train.num_steps,
        train.warmup_steps,
        train.warmup_init_factor,
    ) == (16, 0.02, 90_000, 1000, 0.001)
    assert optimizer.step_boundaries(train) == (60_000, 80_000)
    validate(config)


@pytest.mark.parametrize(
    "batch,lr,steps,warmup,boundaries",
    [
        (8, 0.01, 180_000, 2000, (120_000, 160_000)),
        (64, 0.08, 22_500, 250, (15_000, 20_000)),
    ],
)
def test_lr_steps_and_warmup_follow_the_batch(
    batch, lr, steps, warmup, boundaries
):
    config = coco_r50_fpn.get_config()
    config.train.batch_size = batch
    train = config.train
    assert train.learning_rate == pytest.approx(lr)
    assert (train.num_steps, train.warmup_steps) == (steps, warmup)
    assert optimizer.step_boundaries(train) == boundaries


def test_letterbox_is_tf_model_gardens_input():
    data = coco_r50_fpn.get_config("letterbox").data
    assert (data.resize, tuple(data.image_size)) == ("letterbox", (1024, 1024))
    assert tuple(data.scale_jitter) == (0.8, 1.25)
    assert coco_r50_fpn.get_config("shapes").data.resize == "letterbox"


@pytest.mark.parametrize(
    "variants,placed",
    [
        ("runlocal", ((192, 256), (256, 192))),
        ("letterbox,runlocal", ((256, 256),)),
        ("runlocal,shapes", ((256, 256),)),
    ],
)
def test_runlocal_canvases_hold_its_largest_images(variants, placed):
    """min_size up to 192, max_size 256: a 192 x 256 landscape canvas (and
    its transpose) when grouping, else one 256 x 256."""
    config = coco_r50_fpn.get_config(variants)
    assert (max(config.data.min_size), config.data.max_size) == (192, 256)
    assert canvases.canvases(config.data) == placed
    validate(config)


def test_gn_scratch_keeps_the_group_norm_setup():
    config = coco_r50_fpn.get_config("gn_scratch")
    model, train = config.model, config.train
    assert (model.norm, model.freeze_at, model.backbone_init) == (
        "group",
        0,
        "",
    )
    assert (train.batch_size, train.learning_rate, train.num_steps) == (
        64,
        0.12,
        22_500,
    )
    assert optimizer.step_boundaries(train) == (15_000, 20_000)


def test_variants_combine_and_unknown_ones_are_one_line():
    config = coco_r50_fpn.get_config("gn_scratch,runlocal")
    assert (config.model.norm, config.model.backbone) == ("group", "resnet18")
    assert config.train.num_steps == 4
    assert config.data.eval_split == "val2017[:8]"
    validate(config)
    shapes = coco_r50_fpn.get_config("shapes,runlocal").data
    assert (shapes.source, shapes.eval_split) == ("shapes", "val[:8]")
    assert canvases.canvases(shapes) == ((256, 256),)
    with pytest.raises(
        ValueError,
        match=r"unknown variant 'fast'; known: "
        r".*gn_scratch",
    ):
        coco_r50_fpn.get_config("fast")


# The :torchvision variants' training settings: torchvision's reference
# recipes (docs/training.md, "Training conventions").
@pytest.mark.parametrize("variant", ["torchvision", "torchvision_v2"])
def test_the_variants_train_on_torchvisions_conventions(variant):
    config = coco_r50_fpn.get_config(variant)
    validate(config)
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
