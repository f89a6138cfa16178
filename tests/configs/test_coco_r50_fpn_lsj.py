"""configs/coco_r50_fpn_lsj.py: detectron2's 100-epoch LSJ baseline."""

import pytest
from flax import nnx

from configs import coco_r50_fpn_lsj
from detector import factory
from detector.launch.validate import validate
from detector.state import optimizer


def test_default_is_detectron2s_100_epoch_lsj_recipe():
    config = coco_r50_fpn_lsj.get_config()
    model, train, data = config.model, config.train, config.data
    assert (model.backbone_init, model.freeze_at) == ("", 0)
    assert {
        model.norm,
        model.fpn_norm,
        model.roi.box_head_norm,
        model.roi.mask_head_norm,
    } == {"sync_batch"}
    assert (model.rpn.head_convs, model.rpn.head_norm) == (2, "none")
    assert (model.roi.box_head, model.roi.box_head_dim) == ("4conv1fc", 1024)
    assert (data.augment, data.lsj_min, data.lsj_max) == ("lsj", 0.1, 2.0)
    assert tuple(data.image_size) == (1024, 1024) and data.hflip
    assert (
        train.batch_size,
        train.learning_rate,
        train.num_steps,
        train.warmup_steps,
        train.warmup_init_factor,
        train.weight_decay,
        train.momentum,
    ) == (64, 0.1, 184_375, 500, 0.067, 4e-5, 0.9)
    assert optimizer.step_boundaries(train) == (163_889, 177_546)
    assert train.step_factor == 0.1
    validate(config)


@pytest.mark.parametrize(
    "batch,lr,steps,warmup,boundaries",
    [
        (16, 0.025, 737_500, 2000, (655_556, 710_184)),
        (128, 0.2, 92_187, 250, (81_944, 88_773)),
    ],
)
def test_lr_steps_and_warmup_follow_the_batch(
    batch, lr, steps, warmup, boundaries
):
    config = coco_r50_fpn_lsj.get_config()
    config.train.batch_size = batch
    train = config.train
    assert train.learning_rate == pytest.approx(lr)
    assert (train.num_steps, train.warmup_steps) == (steps, warmup)
    assert optimizer.step_boundaries(train) == boundaries


@pytest.mark.parametrize("variant", ["imagenet", "runlocal", "shapes"])
def test_variants_validate_and_build(variant):
    config = coco_r50_fpn_lsj.get_config(variant)
    validate(config)
    model = nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )
    assert len(model.roi_heads.box_head.convs) == 4


def test_shapes_then_runlocal_is_a_smoke_run_on_the_shapes_set():
    config = coco_r50_fpn_lsj.get_config("shapes,runlocal")
    data, model, train = config.data, config.model, config.train
    assert (data.source, data.train_split, data.eval_split) == (
        "shapes",
        "train",
        "val[:8]",
    )
    assert (data.augment, data.resize, tuple(data.image_size)) == (
        "lsj",
        "letterbox",
        (256, 256),
    )
    assert (model.norm, model.roi.box_head_norm) == ("sync_batch",) * 2
    assert (model.backbone, train.batch_size, train.num_steps) == (
        "resnet18",
        2,
        4,
    )
    validate(config)


@pytest.mark.parametrize("arg", ["runlocal,shapes", "runlocal,imagenet,shapes"])
def test_runlocal_is_applied_last_wherever_it_is_named(arg):
    config = coco_r50_fpn_lsj.get_config(arg)
    expected = coco_r50_fpn_lsj.get_config(
        ",".join([*(n for n in arg.split(",") if n != "runlocal"), "runlocal"])
    )
    assert config.to_dict() == expected.to_dict()
    assert tuple(config.data.image_size) == (256, 256)
    assert (config.train.batch_size, config.train.num_steps) == (2, 4)


def test_unknown_variant_is_one_line():
    with pytest.raises(ValueError, match="unknown variant 'lsj'"):
        coco_r50_fpn_lsj.get_config("lsj")
