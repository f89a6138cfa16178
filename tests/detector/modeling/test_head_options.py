"""The FPN and head options of config.model through the factory: the 2017
layouts by default, the modern ones on request, one-line config errors."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from detector.factory import build_model
from detector.launch.validate import validate
from tests.detector import helpers


def _paths(model, kind=nnx.Param) -> set[str]:
    return {
        "/".join(map(str, path))
        for path, _ in nnx.to_flat_state(nnx.state(model, kind))
    }


def _modern(config, norm: str = "sync_batch"):
    """torchvision v2's layout: BN everywhere, 2-conv RPN, 4conv1fc."""
    modern = copy.deepcopy(config)
    model = modern.model
    model.norm = norm
    model.fpn_norm = norm
    model.rpn.head_convs = 2
    model.roi.box_head = "4conv1fc"
    model.roi.box_head_conv_dim = 16
    model.roi.box_head_norm = norm
    model.roi.mask_head_norm = norm
    return modern


@pytest.mark.parametrize("norm", ["group", "batch", "frozen_batch"])
def test_defaults_keep_the_2017_layout(norm):
    config = helpers.tiny_config()
    config.model.norm = norm
    paths = _paths(
        nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))
    )
    assert "fpn/lateral/0/bias" in paths  # laterals: bias, no norm
    assert not any(p.startswith("fpn/lateral/0/norm") for p in paths)
    normed = norm in ("group", "batch")
    assert ("fpn/output/0/norm/scale" in paths) == normed
    assert ("roi_heads/mask_head/convs/0/norm/scale" in paths) == normed
    assert ("roi_heads/mask_head/convs/0/bias" in paths) != normed
    assert "rpn/head/conv/bias" in paths
    assert not any("more_convs" in p for p in paths)
    assert {
        "roi_heads/box_head/fc1/kernel",
        "roi_heads/box_head/fc2/kernel",
    } <= paths


def test_modern_layout_builds_every_norm_where_torchvision_v2_has_it():
    config = _modern(helpers.tiny_config(), norm="batch")
    model = nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))
    paths = _paths(model, nnx.BatchStat)
    for prefix in (
        "backbone/stem/norm",
        "fpn/lateral/0/norm",
        "fpn/output/0/norm",
        "roi_heads/box_head/convs/3/norm",
        "roi_heads/mask_head/convs/0/norm",
    ):
        assert f"{prefix}/mean" in paths, prefix
    params = _paths(model)
    assert "rpn/head/more_convs/0/bias" in params
    assert "fpn/lateral/0/bias" not in params
    assert "roi_heads/box_head/fc/kernel" in params


@pytest.mark.slow  # two CPU compiles of the whole model: ~80 s
@pytest.mark.parametrize("norm", ["sync_batch", "group"])
def test_modern_layout_trains_with_finite_losses_on_any_batch(norm):
    """Losses and gradients are finite, also where no roi is valid."""
    config = _modern(helpers.tiny_config(), norm)
    validate(config)
    model = build_model(config, rngs=helpers.fast_init_rngs())
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    @jax.jit
    def grads(params, rest, batch):
        def total(params, rest):
            module = nnx.merge(graphdef, params, rest, copy=True)
            return module.losses(batch, jax.random.key(0))["total"]

        return jax.value_and_grad(total)(params, rest)

    for example in (
        helpers.synthetic_example(),
        helpers.empty_example(),
    ):
        batch = jax.tree.map(jnp.asarray, example)
        loss, grad = grads(params, rest, batch)
        assert np.isfinite(float(loss))
        assert all(np.isfinite(g).all() for g in jax.tree.leaves(grad))


@pytest.mark.parametrize(
    "key, value",
    [
        ("model.fpn_norm", "layer"),
        ("model.rpn.head_norm", "auto"),
        ("model.roi.box_head_norm", "instance"),
        ("model.roi.mask_head_norm", "batchnorm"),
        ("model.roi.box_head", "4conv2fc"),
        ("model.rpn.head_convs", 0),
        ("model.roi.box_head_conv_dim", 0),
    ],
)
def test_bad_head_options_are_one_line_naming_the_key(key, value):
    config = helpers.tiny_config()
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
        node = node[parent]
    node[leaf] = value
    with pytest.raises(ValueError) as error:
        validate(config)
    message = str(error.value)
    assert message.startswith(f"config.{key}=") and "\n" not in message


def test_group_norm_heads_need_divisible_channels():
    config = _modern(helpers.tiny_config(), "group")
    config.model.roi.box_head_conv_dim = 18
    with pytest.raises(ValueError, match=r"model\.roi\.box_head_conv_dim"):
        validate(config)
