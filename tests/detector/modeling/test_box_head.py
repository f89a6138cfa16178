"""modeling/box_head.py: the registry, and 4conv1fc against its formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from detector.modeling import box_head


def _options(name, norm="batch", conv_dim=8):
    return box_head.BoxHeadOptions(
        name=name,
        in_channels=4,
        pool_size=3,
        fc_dim=16,
        conv_dim=conv_dim,
        norm=norm,
        groups=4,
    )


def test_2fc_is_the_2017_head():
    head = box_head.build(
        _options("2fc"), 3, dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    assert isinstance(head, box_head.TwoFCHead)
    assert head.fc1.kernel.shape == (3 * 3 * 4, 16)


def test_4conv1fc_matches_conv_bn_relu_then_fc_over_valid_rows():
    head = box_head.build(
        _options("4conv1fc"), 3, dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    assert len(head.convs) == 4 and head.fc.kernel.shape == (9 * 8, 16)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 3, 3, 3, 4)), jnp.float32)
    valid = jnp.array([[True, True, False], [True, False, False]])
    logits, deltas = head(x, valid)
    assert logits.shape == (2, 3, 4) and deltas.shape == (2, 3, 3, 4)

    # The formula: conv3x3 (no bias) -> BN over the valid rois -> ReLU, x4;
    # flatten (Q, Q, D); fc -> ReLU; then the class and delta layers.
    rows = np.asarray(valid).reshape(-1)
    y = np.asarray(x, np.float64).reshape(6, 3, 3, 4)
    for conv in head.convs:
        y = jax.lax.conv_general_dilated(
            jnp.asarray(y, jnp.float32),
            conv.conv.kernel[...],
            (1, 1),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        y = np.asarray(y, np.float64)
        mean = y[rows].mean((0, 1, 2))
        var = y[rows].var((0, 1, 2))
        y = np.maximum((y - mean) / np.sqrt(var + 1e-5), 0.0)
    hidden = np.maximum(
        y.reshape(2, 3, -1) @ np.asarray(head.fc.kernel[...])
        + np.asarray(head.fc.bias[...]),
        0.0,
    )
    want = hidden @ np.asarray(head.classes.kernel[...]) + np.asarray(
        head.classes.bias[...]
    )
    # float32 convs and sums: 1e-3 on every platform
    np.testing.assert_allclose(logits, want, rtol=1e-3, atol=1e-4)


def test_4conv1fc_without_a_norm_has_biases():
    head = box_head.build(
        _options("4conv1fc", norm="none"),
        3,
        dtype=jnp.float32,
        rngs=nnx.Rngs(0),
    )
    assert head.convs[0].bias.shape == (8,)


def test_unknown_box_head_is_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"^config\.model\.roi\.box_head="):
        box_head.build(_options("3fc"), 3, dtype=jnp.float32, rngs=nnx.Rngs(0))
