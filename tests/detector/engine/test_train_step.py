"""The train step module: its finiteness check."""

import jax
import jax.numpy as jnp

from detector.engine import train_step


def test_all_finite_checks_every_float_leaf():
    tree = {
        "w": jnp.ones((2, 3)),
        "count": jnp.array(7, jnp.int32),
        "b": {"x": jnp.zeros(4)},
    }
    assert bool(jax.jit(train_step.all_finite)(tree))
    for bad in (jnp.nan, jnp.inf):
        tree["b"]["x"] = jnp.zeros(4).at[2].set(bad)
        assert not bool(jax.jit(train_step.all_finite)(tree))
    assert bool(train_step.all_finite({"count": jnp.array(1)}))  # no floats
