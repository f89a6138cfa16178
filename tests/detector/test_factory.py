"""factory.py: each part of the model carries its config section."""

from typing import NamedTuple

import ml_collections
import pytest
from flax import nnx

from detector import factory
from detector.modeling import losses
from tests.detector import helpers


class _Pair(NamedTuple):
    size: int
    weights: tuple[float, ...]


def test_options_take_fields_by_name_and_given_ones_first():
    section = ml_collections.ConfigDict({"size": 3, "box_weights": [1.0]})
    pair = factory.options(_Pair, section, weights=tuple(section.box_weights))
    assert pair == _Pair(3, (1.0,))


def test_options_name_a_field_the_section_lacks():
    with pytest.raises(KeyError, match="weights"):
        factory.options(_Pair, ml_collections.ConfigDict({"size": 3}))


@pytest.fixture(scope="module")
def built():
    config = helpers.tiny_config("while_loop")
    config.model.rpn.pre_nms_top_k_train = 96
    config.model.roi.max_mask_rois = 5
    config.model.loss.mask_weight = 0.5
    return config, nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )


def test_the_rpn_carries_model_rpn(built):
    config, model = built
    rpn = model.rpn
    assert rpn.train_proposals.pre_nms_top_k == 96
    assert (
        rpn.test_proposals.pre_nms_top_k == config.model.rpn.pre_nms_top_k_test
    )
    assert rpn.sampling.num_samples == config.model.rpn.num_samples
    assert rpn.box_beta == config.model.loss.rpn_box_beta
    assert rpn.anchors.aspect_ratios == tuple(config.model.aspect_ratios)
    assert rpn.size_divisor == 2**model.fpn.top_level


def test_the_roi_heads_carry_model_roi_and_detection(built):
    config, model = built
    heads = model.roi_heads
    assert heads.sampling.num_rois == config.model.roi.num_rois
    assert heads.detection.backend == config.model.detection.nms_backend
    assert heads.detection.min_size == config.model.detection.min_box_size
    assert heads.pooling.implementation == config.model.roi.align_implementation
    assert (heads.box_head.pool_size, heads.mask_head.pool_size) == (
        config.model.roi.pool_size,
        config.model.roi.mask_pool_size,
    )
    assert heads.mask_head.mask_size == config.model.roi.mask_size
    assert (
        heads.num_mask_rois == 5
    )  # max_mask_rois below num_rois * fg_fraction


def test_the_loss_weights_follow_term_names(built):
    _, model = built
    assert [name for name, _ in model.loss_weights] == list(losses.TERM_NAMES)
    assert dict(model.loss_weights)["mask"] == 0.5
