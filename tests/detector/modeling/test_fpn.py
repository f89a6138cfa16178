"""modeling/fpn.py: level shapes, the max-pooled P6, and the top-down path."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.modeling import fpn, norms
from tests.detector import helpers


def test_levels_and_p6_from_p5():
    channels = {2: 8, 3: 16, 4: 32, 5: 64}
    model = fpn.FPN(
        channels,
        channels=16,
        min_level=2,
        max_level=6,
        lateral_norm=norms.NO_NORM,
        output_norm=norms.NormOptions("group", 4),
        dtype=jnp.float32,
        rngs=helpers.fast_init_rngs(),
    )
    rng = np.random.default_rng(0)
    features = {
        level: jnp.asarray(
            rng.normal(size=(2, 64 // 2**level, 64 // 2**level, c)), jnp.float32
        )
        for level, c in channels.items()
    }
    graphdef, state = nnx.split(model)
    out = jax.jit(lambda s, f: nnx.merge(graphdef, s)(f))(state, features)
    assert [x.shape for x in out] == [
        (2, 16, 16, 16),
        (2, 8, 8, 16),
        (2, 4, 4, 16),
        (2, 2, 2, 16),
        (2, 1, 1, 16),
    ]
    np.testing.assert_array_equal(out[4], out[3][:, ::2, ::2])


def test_top_down_path_reaches_the_finest_level():
    channels = {2: 4, 3: 4}
    model = fpn.FPN(
        channels,
        channels=8,
        min_level=2,
        max_level=3,
        lateral_norm=norms.NO_NORM,
        output_norm=norms.NO_NORM,  # 'auto' of a frozen_batch backbone
        dtype=jnp.float32,
        rngs=helpers.fast_init_rngs(),
    )
    assert not hasattr(model.output[0], "norm")  # new layers: no norm
    graphdef, state = nnx.split(model)

    @jax.jit
    def p2_grad_wrt_c3(state, c2, c3):
        return jax.grad(
            lambda c3: jnp.sum(nnx.merge(graphdef, state)({2: c2, 3: c3})[0])
        )(c3)

    grad = p2_grad_wrt_c3(state, jnp.ones((1, 8, 8, 4)), jnp.ones((1, 4, 4, 4)))
    assert np.abs(np.asarray(grad)).sum() > 0.0
    upsampled = fpn.upsample2x(jnp.arange(4.0).reshape(1, 2, 2, 1))
    np.testing.assert_array_equal(
        upsampled[0, :, :, 0],
        [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]],
    )
