"""Learning-rate schedule and optax optimizer from `config.train`."""

import jax
import jax.numpy as jnp
import ml_collections
import optax

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("step", "cosine")


def learning_rate_schedule(train: ml_collections.ConfigDict) -> optax.Schedule:
    """Linear warmup from warmup_init_factor * lr, then step or cosine decay."""
    if train.schedule not in SCHEDULES:
        raise ValueError(f"config.train.schedule={train.schedule!r} is not "
                         f"known; choose one of {', '.join(SCHEDULES)}")
    base, warmup = train.learning_rate, train.warmup_steps
    if train.schedule == "cosine":
        decay = optax.cosine_decay_schedule(
            base, max(train.num_steps - warmup, 1))
    else:
        # Steps count from the end of warmup; a boundary inside warmup acts
        # as soon as it ends.
        scales = {}
        for boundary in train.step_boundaries:
            shifted = max(int(boundary) - warmup, 0)
            scales[shifted] = scales.get(shifted, 1.0) * train.step_factor
        decay = optax.piecewise_constant_schedule(base, scales)
    if warmup <= 0:
        return decay
    ramp = optax.linear_schedule(base * train.warmup_init_factor, base,
                                 warmup)
    return optax.join_schedules([ramp, decay], [warmup])


def _decay_mask(params):
    """Weight decay on kernels only: not on biases and norm scales."""
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def make_optimizer(train: ml_collections.ConfigDict
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optax chain (clip, optimizer, weight decay) and its schedule."""
    if train.optimizer not in OPTIMIZERS:
        raise ValueError(f"config.train.optimizer={train.optimizer!r} is not "
                         f"known; choose one of {', '.join(OPTIMIZERS)}")
    schedule = learning_rate_schedule(train)
    if train.optimizer == "adamw":
        core = optax.adamw(schedule, weight_decay=train.weight_decay,
                           mask=_decay_mask)
    else:
        core = optax.chain(
            optax.add_decayed_weights(train.weight_decay, mask=_decay_mask),
            optax.sgd(schedule, momentum=train.momentum))
    if train.grad_clip_norm > 0:
        core = optax.chain(optax.clip_by_global_norm(train.grad_clip_norm),
                           core)
    return core, schedule
