"""modeling/norms.py: masked BatchNorm against its formula, the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from detector.modeling import norms


def _x(shape=(6, 3, 3, 4), seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(2.0, 3.0, shape), jnp.float32)


def _reference(x, rows, eps=1e-5):
    """BatchNorm's formula over `rows` (scale 1, bias 0), biased var."""
    x = np.asarray(x, np.float64)
    picked = x[rows].reshape(-1, x.shape[-1])
    mean, var = picked.mean(0), picked.var(0)
    return (x - mean) / np.sqrt(var + eps), mean, var


def test_masked_statistics_count_the_valid_rows_only():
    x = _x()
    mask = jnp.array([True, False, True, True, False, False])
    norm = norms.BatchNorm(4, rngs=nnx.Rngs(0))
    y = nnx.jit(lambda m, x, k: m(x, mask=k))(norm, x, mask)
    want, mean, var = _reference(x, np.asarray(mask))
    # float32 sums of squares: 1e-4 on every platform
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.mean[...], 0.1 * mean, rtol=1e-4)
    np.testing.assert_allclose(norm.var[...], 0.9 + 0.1 * var, rtol=1e-4)


def test_no_valid_row_gives_no_nan_and_keeps_the_running_statistics():
    norm = norms.BatchNorm(4, rngs=nnx.Rngs(0))
    y = nnx.jit(lambda m, x, k: m(x, mask=k))(norm, _x(), jnp.zeros((6,), bool))
    assert np.isfinite(np.asarray(y)).all()
    np.testing.assert_array_equal(norm.mean[...], np.zeros(4))
    np.testing.assert_array_equal(norm.var[...], np.ones(4))


def test_without_a_mask_or_an_axis_it_is_nnx_batch_norm():
    x = _x()
    ours = norms.BatchNorm(4, rngs=nnx.Rngs(0))
    theirs = nnx.BatchNorm(4, momentum=0.9, epsilon=1e-5, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(ours(x), theirs(x))
    np.testing.assert_array_equal(ours.var[...], theirs.var[...])
    ours.eval()
    theirs.eval()
    np.testing.assert_array_equal(ours(x, mask=x[:, 0, 0, 0] > 0), theirs(x))


def test_cross_replica_statistics_outside_a_mesh_are_local():
    """An unbound axis (a plain call) normalises with this call's rows."""
    x = _x()
    synced = norms.BatchNorm(4, cross_replica_axis="data", rngs=nnx.Rngs(0))
    local = norms.BatchNorm(4, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(synced(x), local(x), rtol=1e-5, atol=1e-5)
    assert not norms.axis_bound("data")


def test_group_norm_matches_its_formula_and_ignores_the_mask():
    x = _x((2, 3, 3, 8))
    norm = norms.make_norm(
        norms.NormOptions("group", 4), 8, dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    y = norm(x, mask=jnp.array([True, False]))
    g = np.asarray(x, np.float64).reshape(2, 3, 3, 4, 2)
    mean = g.mean((1, 2, 4), keepdims=True)
    var = g.var((1, 2, 4), keepdims=True)
    want = ((g - mean) / np.sqrt(var + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(norms.HEAD_NORMS))
def test_conv_norm_has_a_bias_only_without_a_norm(name):
    layer = norms.conv_norm(
        4,
        8,
        3,
        norm=norms.NormOptions(name, 4),
        dtype=jnp.float32,
        rngs=nnx.Rngs(0),
    )
    paths = {
        "/".join(map(str, path))
        for path, _ in nnx.to_flat_state(nnx.state(layer, nnx.Param))
    }
    if name == "none":
        assert paths == {"kernel", "bias"}
    else:
        assert paths == {"conv/kernel", "norm/scale", "norm/bias"}
    y = layer(_x((2, 5, 5, 4)), jnp.array([True, True]))
    assert y.shape == (2, 5, 5, 8) and (np.asarray(y) >= 0).all()  # ReLU


def test_one_by_one_convs_are_linear_layers():
    layer = norms.conv_norm(
        4,
        8,
        norms.ConvOptions(1, relu=False),
        norm=norms.NormOptions("batch", 1),
        dtype=jnp.float32,
        rngs=nnx.Rngs(0),
    )
    assert layer.conv.kernel.shape == (4, 8)
    backbone_conv = norms.conv_norm(
        4,
        8,
        norms.ConvOptions(1, linear_1x1=False),
        norm=norms.NormOptions("frozen_batch"),
        dtype=jnp.float32,
        rngs=nnx.Rngs(0),
    )
    assert backbone_conv.conv.kernel.shape == (1, 1, 4, 8)
    x = _x((2, 5, 5, 4))
    want = norms.BatchNorm(8, rngs=nnx.Rngs(1))
    np.testing.assert_allclose(
        layer(x), want(x @ layer.conv.kernel[...]), rtol=1e-5, atol=1e-5
    )


def test_the_axis_is_bound_inside_a_shard_map():
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    seen = jax.shard_map(
        lambda x: jnp.full((1,), norms.axis_bound("data")),
        mesh=mesh,
        in_specs=jax.sharding.PartitionSpec("data"),
        out_specs=jax.sharding.PartitionSpec("data"),
    )(jnp.zeros((1,)))
    assert bool(seen[0])
