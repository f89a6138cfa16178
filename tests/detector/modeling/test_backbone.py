"""modeling/backbone.py: stage shapes, parameter counts, the three norms.

Shapes and counts use nnx.eval_shape / jax.eval_shape: nothing compiles.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from detector.modeling import backbone, norms
from tests.detector import helpers


def _abstract(name, norm="group", width=64, groups=32, top_level=5):
    return nnx.eval_shape(
        lambda: backbone.ResNet(
            backbone.BackboneOptions(name, width, norm, groups, 0, 1e-5),
            top_level=top_level,
            dtype=jnp.float32,
            rngs=nnx.Rngs(0),
        )
    )


def _count(module, kind=nnx.Param):
    return sum(x.size for x in jax.tree.leaves(nnx.state(module, kind)))


@pytest.mark.parametrize(
    "name, channels",
    [
        ("resnet18", (64, 128, 256, 512)),
        ("resnet50", (256, 512, 1024, 2048)),
        ("tiny", (16, 32, 64, 128)),
    ],
)
def test_stage_shapes(name, channels):
    width = 16 if name == "tiny" else 64
    model = _abstract(name, width=width, groups=8)
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(
        lambda s, x: nnx.merge(graphdef, s)(x),
        state,
        jax.ShapeDtypeStruct((2, 64, 96, 3), jnp.float32),
    )
    assert {level: x.shape for level, x in out.items()} == {
        level: (2, 64 // 2**level, 96 // 2**level, c)
        for level, c in zip(range(2, 6), channels, strict=True)
    }
    assert model.out_channels == dict(zip(range(2, 6), channels, strict=True))


def test_resnet50_parameter_count_matches_torchvision():
    # torchvision resnet50: 25,557,032 parameters, less the 1000-way fc
    # (2048 * 1000 + 1000 = 2,049,000) and the BatchNorm affine terms
    # (2 * 26,560 channels = 53,120), leaves 23,454,912 conv weights.
    frozen = _abstract("resnet50", norm="frozen_batch")
    assert _count(frozen) == 25_557_032 - 2_049_000 - 53_120
    # Frozen BN holds scale, bias, mean and var per channel, none a Param.
    assert _count(frozen, norms.FrozenStat) == 4 * 26_560
    grouped = _abstract("resnet50", norm="group")
    assert _count(grouped) == 23_454_912 + 2 * 26_560


def test_tiny_parameter_count_by_hand():
    # width 8, GroupNorm (scale + bias = 2 per channel), 3x3 convs, no bias:
    # stem 7*7*3*8 + 16                                   = 1,192
    # stage 2 (8->8):   2 * (9*8*8 + 16)                   = 1,184
    # stage 3 (8->16):  9*8*16 + 32 + 9*16*16 + 32 + 8*16 + 32 = 3,680
    # stage 4 (16->32): 9*16*32 + 64 + 9*32*32 + 64 + 16*32 + 64 = 14,528
    # stage 5 is not built when the pyramid stops at level 4.
    model = _abstract("tiny", width=8, groups=4, top_level=4)
    assert _count(model) == 1_192 + 1_184 + 3_680 + 14_528
    assert sorted(model.out_channels) == [2, 3, 4]


def test_batch_norm_follows_train_and_eval():
    model = norms.conv_norm(
        3,
        4,
        3,
        norm=norms.NormOptions("batch"),
        dtype=jnp.float32,
        rngs=helpers.fast_init_rngs(),
    )
    x = jnp.asarray(
        np.random.default_rng(0).normal(3.0, 2.0, (4, 5, 5, 3)), jnp.float32
    )
    run = nnx.jit(lambda module, x: module(x))  # updates module in place
    model.train()
    run(model, x)
    trained_mean = np.asarray(model.norm.mean[...])
    assert not np.allclose(trained_mean, 0.0)
    model.eval()
    run(model, x)
    np.testing.assert_array_equal(model.norm.mean[...], trained_mean)


def test_frozen_batch_norm_applies_its_statistics():
    norm = norms.FrozenBatchNorm(2)
    norm.scale[...] = jnp.array([2.0, 1.0])
    norm.bias[...] = jnp.array([0.0, 1.0])
    norm.mean[...] = jnp.array([1.0, 0.0])
    norm.var[...] = jnp.array([4.0, 1.0])
    out = jax.jit(lambda x: norm(x))(jnp.array([[3.0, 2.0]]))
    np.testing.assert_allclose(out, [[2.0, 3.0]], rtol=1e-4)
    assert not jax.tree.leaves(nnx.state(norm, nnx.Param))
