"""Learning-rate schedule and optax optimizer from the config; frozen params
get no optimizer state, no weight decay and no updates."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import optax

from detector.modeling import backbone

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("step", "cosine")
TRAINABLE, FROZEN = "trainable", "frozen"


def step_boundaries(train: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The step schedule's boundaries: step_boundaries, or step_fractions
    of num_steps (rounded)."""
    if not train.step_fractions:
        return tuple(int(b) for b in train.step_boundaries)
    if train.step_boundaries:
        raise ValueError(
            "config.train.step_fractions="
            f"{tuple(train.step_fractions)!r}: set either it or "
            "config.train.step_boundaries, not both"
        )
    if not all(0.0 < f < 1.0 for f in train.step_fractions):
        raise ValueError(
            "config.train.step_fractions="
            f"{tuple(train.step_fractions)!r}: each must be in "
            "(0, 1)"
        )
    return tuple(round(f * train.num_steps) for f in train.step_fractions)


def learning_rate_schedule(train: ml_collections.ConfigDict) -> optax.Schedule:
    """Linear warmup from warmup_init_factor * lr, then step or cosine decay."""
    if train.schedule not in SCHEDULES:
        raise ValueError(
            f"config.train.schedule={train.schedule!r} is not "
            f"known; choose one of {', '.join(SCHEDULES)}"
        )
    base, warmup = train.learning_rate, train.warmup_steps
    if train.schedule == "cosine":
        decay = optax.cosine_decay_schedule(
            base, max(train.num_steps - warmup, 1)
        )
    else:
        # Steps count from the end of warmup; a boundary inside warmup acts
        # as soon as it ends.
        scales = {}
        for boundary in step_boundaries(train):
            shifted = max(int(boundary) - warmup, 0)
            scales[shifted] = scales.get(shifted, 1.0) * train.step_factor
        decay = optax.piecewise_constant_schedule(base, scales)
    if warmup <= 0:
        return decay
    ramp = optax.linear_schedule(base * train.warmup_init_factor, base, warmup)
    return optax.join_schedules([ramp, decay], [warmup])


def path_name(path: tuple) -> str:
    """'backbone/stem/conv/kernel' for a pytree key path (nnx.State, dict)."""
    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.GetAttrKey):
            continue  # an nnx.Variable's .value
        parts.append(str(getattr(key, "key", getattr(key, "idx", key))))
    return "/".join(parts)


def is_frozen(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + "/") for p in prefixes)


def _labels(params, prefixes: tuple[str, ...]):
    return jax.tree_util.tree_map_with_path(
        lambda path, _: (
            FROZEN if is_frozen(path_name(path), prefixes) else TRAINABLE
        ),
        params,
    )


def _kernels(params):
    """Weight decay on kernels only: not on biases and norm scales."""
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def _every_param(params):
    """Weight decay on every parameter (torchvision's reference scripts)."""
    return jax.tree.map(lambda _: True, params)


# config.train.weight_decay_on: which trainable params weight decay reaches.
DECAY_MASKS = {"kernels": _kernels, "all": _every_param}


def check_decay_mask(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown mask."""
    if name not in DECAY_MASKS:
        raise ValueError(
            f"config.{key}={name!r}: unknown weight decay mask; known: "
            f"{', '.join(DECAY_MASKS)}"
        )


def global_norm(tree) -> jax.Array:
    """The L2 norm f32[] of all leaves of `tree`, whatever their names.

    Each leaf's sum of squares is taken on its own, then the sums are sorted
    by value and added: renaming or reordering modules (which reorders the
    leaves, flattened in path order) leaves every bit of it as it was. The
    logged gradient norm and clipping both use it.
    """
    squares = [
        jnp.sum(jnp.square(x.astype(jnp.float32)))
        for x in jax.tree.leaves(tree)
    ]
    if not squares:
        return jnp.zeros((), jnp.float32)
    return jnp.sqrt(jnp.sum(jnp.sort(jnp.stack(squares))))


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """optax.clip_by_global_norm by `global_norm`: updates scaled by
    max_norm / norm when their norm is not below max_norm."""

    def update(updates, state, params=None):
        del params
        norm = global_norm(updates)
        clipped = jax.tree.map(
            lambda t: jnp.where(
                norm < max_norm, t, (t / norm.astype(t.dtype)) * max_norm
            ),
            updates,
        )
        return clipped, state

    return optax.GradientTransformation(
        lambda params: optax.EmptyState(), update
    )


def _update_rule(
    train: ml_collections.ConfigDict, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """Clip, optimizer and weight decay of the trainable params."""
    if train.optimizer not in OPTIMIZERS:
        raise ValueError(
            f"config.train.optimizer={train.optimizer!r} is not "
            f"known; choose one of {', '.join(OPTIMIZERS)}"
        )
    check_decay_mask(train.weight_decay_on, "train.weight_decay_on")
    decay_mask = DECAY_MASKS[train.weight_decay_on]
    if train.optimizer == "adamw":
        core = optax.adamw(
            schedule, weight_decay=train.weight_decay, mask=decay_mask
        )
    else:
        core = optax.chain(
            optax.add_decayed_weights(train.weight_decay, mask=decay_mask),
            optax.sgd(schedule, momentum=train.momentum),
        )
    if train.grad_clip_norm > 0:
        core = optax.chain(clip_by_global_norm(train.grad_clip_norm), core)
    return core


def make_optimizer(
    config: ml_collections.ConfigDict,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optax transformation of `config` and its learning-rate schedule.

    Params under backbone.frozen_prefixes (model.freeze_at) are frozen: no
    state, no updates. Gradient clipping sees the trainable params only.
    """
    schedule = learning_rate_schedule(config.train)
    rule = _update_rule(config.train, schedule)
    prefixes = backbone.frozen_prefixes(
        config.model.backbone, config.model.freeze_at
    )
    if not prefixes:
        return rule, schedule
    tx = optax.multi_transform(
        {TRAINABLE: rule, FROZEN: optax.set_to_zero()},
        functools.partial(_labels, prefixes=prefixes),
    )
    return tx, schedule
