"""Learning-rate schedules and the optax chain built from config.train."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from detector import config as config_lib
from detector import optimizer


def _train(**overrides):
    train = config_lib.base_config().train
    train.update(overrides)
    return train


def _config(**train_overrides):
    config = config_lib.base_config()
    config.train.update(train_overrides)
    return config


def test_step_schedule_warms_up_then_drops_at_boundaries():
    train = _train(learning_rate=0.1, warmup_steps=10, warmup_init_factor=0.5,
                   schedule="step", step_boundaries=(5, 30, 50),
                   step_factor=0.1, num_steps=60)
    lr = optimizer.learning_rate_schedule(train)
    np.testing.assert_allclose(
        [lr(0), lr(5), lr(10), lr(29), lr(30), lr(49), lr(50)],
        # boundary 5 lies inside warmup: it applies when warmup ends.
        [0.05, 0.075, 0.01, 0.01, 0.001, 0.001, 0.0001], rtol=1e-5)


def test_cosine_schedule_reaches_zero_at_the_end():
    train = _train(learning_rate=2e-3, warmup_steps=0, schedule="cosine",
                   num_steps=100)
    lr = optimizer.learning_rate_schedule(train)
    np.testing.assert_allclose([lr(0), lr(50), lr(100)], [2e-3, 1e-3, 0.0],
                               atol=1e-8)


@pytest.mark.parametrize("key,value,message", [
    ("optimizer", "lamb", r"config.train.optimizer='lamb' is not known; "
     r"choose one of sgd, adamw"),
    ("schedule", "linear", r"config.train.schedule='linear' is not known"),
])
def test_unknown_names_fail_with_the_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        optimizer.make_optimizer(_config(**{key: value}))


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_weight_decay_skips_biases_and_clipping_bounds_updates(name):
    config = _config(optimizer=name, learning_rate=1.0, warmup_steps=0,
                     weight_decay=0.5, grad_clip_norm=1.0, momentum=0.0,
                     schedule="step", step_boundaries=())
    tx, _ = optimizer.make_optimizer(config)
    params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))}
    zero_grads = {"kernel": jnp.zeros((2, 2)), "bias": jnp.zeros((2,))}
    updates, _ = tx.update(zero_grads, tx.init(params), params)
    assert np.all(np.asarray(updates["bias"]) == 0)  # no decay on biases
    assert np.all(np.asarray(updates["kernel"]) < 0)  # decay on kernels
    huge = {"kernel": jnp.full((2, 2), 1e6), "bias": jnp.full((2,), 1e6)}
    if name == "sgd":  # plain SGD: the clipped gradient is the update
        updates, _ = tx.update(huge, tx.init(params), params)
        assert float(optax.tree.norm(updates["bias"])) <= 1.0 + 1e-5
