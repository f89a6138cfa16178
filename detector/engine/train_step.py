"""The data-parallel train step, a `shard_map` over 'data': (state, batch,
key) -> (state, metrics). JAX, Flax and optax only (no TensorFlow)."""

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from detector.modeling import losses
from detector.state import optimizer
from detector.state import train_state as state_lib

# Train-step output checked every step and not logged: all weights finite.
STATE_FINITE = "state_finite"


def all_finite(tree: Any) -> jax.Array:
    """bool scalar: every float value of `tree` is finite."""
    flags = [
        jnp.isfinite(x).all()
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.stack(flags).all() if flags else jnp.asarray(True)


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    mesh: Mesh,
) -> jax.stages.Wrapped:
    """jit(shard_map(step)): (state, batch, key) -> (state, metrics).

    Besides the logged metrics, `metrics[STATE_FINITE]` says whether the
    new params and other variables are all finite.
    """

    def loss_fn(params, rest, batch, key):
        # Fresh Variables at this trace level: BatchNorm updates its
        # statistics in place, which nnx allows only there.
        model = nnx.merge(graphdef, params, rest, copy=True)
        terms = model.losses(batch, key)
        _, _, new_rest = nnx.split(model, nnx.Param, ...)
        return terms["total"], (terms, new_rest)

    def local_step(state: state_lib.TrainState, batch, key):
        key = jax.random.fold_in(
            jax.random.fold_in(key, state.step), lax.axis_index("data")
        )
        grads, (terms, rest) = jax.grad(loss_fn, has_aux=True)(
            state.params, state.rest, batch, key
        )
        grads, terms, rest = lax.pmean((grads, terms, rest), "data")
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        metrics = {name: terms[name] for name in losses.LOSS_NAMES}
        metrics["learning_rate"] = schedule(state.step)
        metrics["grad_norm"] = optimizer.global_norm(grads)
        params = optax.apply_updates(state.params, updates)
        metrics[STATE_FINITE] = all_finite((params, rest))
        new_state = state.replace(
            step=state.step + 1, params=params, rest=rest, opt_state=opt_state
        )
        return new_state, metrics

    sharded = jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P(), P("data"), P()),
        out_specs=(P(), P()),
        check_vma=False,
    )
    return jax.jit(sharded, donate_argnums=0)
