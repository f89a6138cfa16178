"""modeling/box_coder.py: encode / decode round trip and the dw clip."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from detector.modeling import box_coder


def test_round_trip_and_worked_deltas():
    references = jnp.array([[0.0, 0.0, 10.0, 20.0], [5.0, 5.0, 9.0, 7.0]])
    boxes = jnp.array([[5.0, 0.0, 15.0, 40.0], [4.0, 2.0, 12.0, 10.0]])
    weights = (10.0, 10.0, 5.0, 5.0)
    encode = jax.jit(box_coder.encode, static_argnums=2)
    decode = jax.jit(box_coder.decode, static_argnums=2)
    deltas = encode(boxes, references, weights)
    # Box 0: centre moves +5 in x (half a width), +10 in y, height doubles.
    np.testing.assert_allclose(
        deltas[0],
        [10.0 * 0.5, 10.0 * 0.5, 0.0, 5.0 * math.log(2.0)],
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        decode(deltas, references, weights), boxes, rtol=1e-5, atol=1e-4
    )


def test_decode_clips_large_scales_and_padding_encodes_finite():
    reference = jnp.array([[0.0, 0.0, 16.0, 16.0]])
    huge = box_coder.decode(
        jnp.array([[0.0, 0.0, 50.0, 50.0]]), reference, (1.0, 1.0, 1.0, 1.0)
    )
    np.testing.assert_allclose(huge[0, 2] - huge[0, 0], 1000.0, rtol=1e-4)
    padded = box_coder.encode(
        jnp.zeros((1, 4)), reference, (1.0, 1.0, 1.0, 1.0)
    )
    assert np.all(np.isfinite(padded))
