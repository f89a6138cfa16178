"""Learning-rate schedules and the optax chain built from config.train."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from detector import config as config_lib
from detector.state import optimizer
from tests.helpers import torch_process


def _train(**overrides):
    train = config_lib.base_config().train
    train.update(overrides)
    return train


def _config(**train_overrides):
    config = config_lib.base_config()
    config.train.update(train_overrides)
    return config


def test_step_schedule_warms_up_then_drops_at_boundaries():
    train = _train(
        learning_rate=0.1,
        warmup_steps=10,
        warmup_init_factor=0.5,
        schedule="step",
        step_boundaries=(5, 30, 50),
        step_factor=0.1,
        num_steps=60,
    )
    lr = optimizer.learning_rate_schedule(train)
    np.testing.assert_allclose(
        [lr(0), lr(5), lr(10), lr(29), lr(30), lr(49), lr(50)],
        # boundary 5 lies inside warmup: it applies when warmup ends.
        [0.05, 0.075, 0.01, 0.01, 0.001, 0.001, 0.0001],
        rtol=1e-5,
    )


def test_cosine_schedule_reaches_zero_at_the_end():
    train = _train(
        learning_rate=2e-3, warmup_steps=0, schedule="cosine", num_steps=100
    )
    lr = optimizer.learning_rate_schedule(train)
    np.testing.assert_allclose(
        [lr(0), lr(50), lr(100)], [2e-3, 1e-3, 0.0], atol=1e-8
    )


@pytest.mark.parametrize(
    "key,value,message",
    [
        (
            "optimizer",
            "lamb",
            r"config.train.optimizer='lamb' is not known; "
            r"choose one of sgd, adamw",
        ),
        ("schedule", "linear", r"config.train.schedule='linear' is not known"),
        (
            "weight_decay_on",
            "norms",
            r"config.train.weight_decay_on='norms': unknown weight decay",
        ),
    ],
)
def test_unknown_names_fail_with_the_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        optimizer.make_optimizer(_config(**{key: value}))


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_weight_decay_skips_biases_and_clipping_bounds_updates(name):
    config = _config(
        optimizer=name,
        learning_rate=1.0,
        warmup_steps=0,
        weight_decay=0.5,
        grad_clip_norm=1.0,
        momentum=0.0,
        schedule="step",
        step_boundaries=(),
    )
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


def test_step_fractions_place_the_boundaries():
    train = _train(
        num_steps=900, step_boundaries=(), step_fractions=(2 / 3, 8 / 9)
    )
    assert optimizer.step_boundaries(train) == (600, 800)
    with pytest.raises(
        ValueError,
        match=r"config\.train\.step_fractions="
        r".*set either it or config\.train\.step_boundaries",
    ):
        optimizer.step_boundaries(_train(step_fractions=(0.5,)))
    with pytest.raises(ValueError, match=r"each must be in \(0, 1\)"):
        optimizer.step_boundaries(
            _train(step_boundaries=(), step_fractions=(1.5,))
        )


def _params():
    """A model-shaped params tree: backbone stem and stages, and a head."""

    def leaf():
        return {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))}

    return {
        "backbone": {
            "stem": {"conv": leaf()},
            "stages": {0: {"conv": leaf()}, 1: {"conv": leaf()}},
        },
        "box_head": {"fc1": leaf()},
    }


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_frozen_params_get_no_state_and_no_updates(name):
    config = _config(
        optimizer=name,
        learning_rate=0.1,
        warmup_steps=0,
        weight_decay=0.1,
        momentum=0.9,
        grad_clip_norm=1.0,
        schedule="step",
        step_boundaries=(),
    )
    config.model.freeze_at = 2  # the stem and stage 1 (stages/0)
    tx, _ = optimizer.make_optimizer(config)
    params = _params()
    state = tx.init(params)
    # Optimizer state (momentum, Adam moments) only for trainable params.
    names = [
        optimizer.path_name(path)
        for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]
    ]
    assert not [n for n in names if "stem" in n or "stages/0" in n]
    assert [n for n in names if n.endswith("stages/1/conv/kernel")]
    grads = jax.tree.map(jnp.ones_like, params)
    for _ in range(2):
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    frozen = (params["backbone"]["stem"], params["backbone"]["stages"][0])
    for leaf in jax.tree.leaves(frozen):
        np.testing.assert_array_equal(leaf, 1.0)
    for leaf in jax.tree.leaves(
        (params["backbone"]["stages"][1], params["box_head"])
    ):
        assert np.all(np.asarray(leaf) < 1.0)


def _named_leaves(names):
    """Leaves whose float32 sums of squares span 12 orders of magnitude, so
    that the order they are added in shows in the last bits."""
    rng = np.random.default_rng(0)
    return {
        name: jnp.asarray(
            rng.normal(size=(int(rng.integers(1, 40)),)) * 10.0 ** (i % 7 - 3),
            jnp.float32,
        )
        for i, name in enumerate(names)
    }


def test_global_norm_does_not_depend_on_the_names():
    """Renamed and reordered parts: the same norm, bit for bit, where a sum
    in path order (optax.tree.norm) changes."""
    names = [f"part{i:02d}" for i in range(60)]
    tree = _named_leaves(names)
    renamed = {
        f"{name[::-1]}/{len(names) - i}": tree[name]
        for i, name in enumerate(names)
    }
    renamed = dict(reversed(list(renamed.items())))
    in_path_order = jax.jit(optax.tree.norm)
    assert in_path_order(tree) != in_path_order(renamed)
    global_norm = jax.jit(optimizer.global_norm)  # as in the train step
    norm = global_norm(tree)
    assert norm.dtype == jnp.float32
    assert norm.tobytes() == global_norm(renamed).tobytes()
    np.testing.assert_allclose(
        norm,
        np.sqrt(
            sum(np.sum(np.square(x, dtype=np.float64)) for x in tree.values())
        ),
        rtol=1e-6,
    )


def test_clipping_scales_by_the_same_norm():
    tree = _named_leaves([f"p{i}" for i in range(8)])
    norm = optimizer.global_norm(tree)
    clip = optimizer.clip_by_global_norm(float(norm) / 2)
    clipped, _ = clip.update(tree, clip.init(tree))
    for name, leaf in tree.items():
        np.testing.assert_array_equal(
            clipped[name], leaf / norm * (float(norm) / 2)
        )
    unclipped, _ = optimizer.clip_by_global_norm(float(norm) * 2).update(
        tree, clip.init(tree)
    )
    jax.tree.map(np.testing.assert_array_equal, unclipped, tree)


# torch.optim.SGD's updates (momentum 0.9, weight decay on every parameter,
# as torchvision's reference scripts), two steps, in a child process.
_TORCH_SGD = """
import sys, numpy as np, torch
arrays = np.load(sys.argv[1])
names = [n for n in arrays.files if not n.startswith("grad")]
params = [torch.nn.Parameter(torch.from_numpy(arrays[n])) for n in names]
sgd = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
for step in range(2):
    for n, p in zip(names, params):
        p.grad = torch.from_numpy(arrays[f"grad{step}_{n}"])
    sgd.step()
np.savez(sys.argv[2], **{n: p.detach().numpy() for n, p in zip(names, params)})
"""


@torch_process.needs_torch
def test_two_sgd_updates_are_torch_optim_sgds(tmp_path):
    """The same gradients, learning rate and weight decay: parameters
    within 1e-6 relative of torch.optim.SGD's after each of two steps."""
    config = _config(
        optimizer="sgd",
        learning_rate=0.02,
        momentum=0.9,
        weight_decay=1e-4,
        weight_decay_on="all",
        warmup_steps=0,
        schedule="step",
        step_boundaries=(),
    )
    rng = np.random.default_rng(0)
    params = {
        "kernel": rng.standard_normal((3, 4)).astype(np.float32),
        "bias": rng.standard_normal(4).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, 4).astype(np.float32),
    }
    grads = [
        {
            k: rng.standard_normal(v.shape).astype(np.float32)
            for k, v in params.items()
        }
        for _ in range(2)
    ]
    np.savez(
        tmp_path / "in.npz",
        **params,
        **{
            f"grad{i}_{k}": v for i, g in enumerate(grads) for k, v in g.items()
        },
    )
    torch_process.run(
        ["-c", _TORCH_SGD, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    )
    theirs = np.load(tmp_path / "out.npz")
    tx, _ = optimizer.make_optimizer(config)
    ours = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(ours)
    for g in grads:
        updates, state = tx.update(
            {k: jnp.asarray(v) for k, v in g.items()}, state, ours
        )
        ours = optax.apply_updates(ours, updates)
    for name, value in ours.items():
        np.testing.assert_allclose(value, theirs[name], rtol=1e-6, err_msg=name)
