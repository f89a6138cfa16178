"""The stop on a non-finite loss, gradient or weight without a per-step
sync: the device keeps the first bad step (its number, loss, gradient norm
and weights' flag) across steps; the host reads it only where it must,
before a checkpoint, on a log step and at the end (docs/training.md)."""

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from detector.engine import train_metrics
from detector.engine import train_step as step_lib

# The record's step before any non-finite step.
NONE_YET = -1


def _empty() -> dict[str, jax.Array]:
    return {
        "step": jnp.asarray(NONE_YET, jnp.int32),
        "total": jnp.zeros((), jnp.float32),
        "grad_norm": jnp.zeros((), jnp.float32),
        "state_finite": jnp.asarray(True),
    }


@jax.jit
def _updated(
    record: dict[str, jax.Array],
    metrics: dict[str, jax.Array],
    step: jax.Array,
) -> dict[str, jax.Array]:
    """`record`, or this step's values where it is the first bad one."""
    finite = metrics[step_lib.STATE_FINITE]
    good = (
        jnp.isfinite(metrics["total"]) & jnp.isfinite(metrics["grad_norm"])
    ) & finite
    first = (record["step"] == NONE_YET) & ~good
    now = {
        "step": step.astype(jnp.int32),
        "total": metrics["total"].astype(jnp.float32),
        "grad_norm": metrics["grad_norm"].astype(jnp.float32),
        "state_finite": finite,
    }
    return jax.tree.map(lambda n, r: jnp.where(first, n, r), now, record)


class FiniteGuard:
    """The first non-finite step of a run, recorded on the device.

    Every process updates its replicated copy the same way (the same
    program on the same replicated metrics), so every process sees the
    same first bad step.
    """

    def __init__(self, mesh: Mesh):
        """The empty record, computed on the device (no host transfer),
        replicated over `mesh`."""
        self._record = jax.jit(_empty, out_shardings=NamedSharding(mesh, P()))()

    def update(self, metrics: dict[str, jax.Array], step: jax.Array) -> None:
        """Folds in a step's metrics (with STATE_FINITE) and its number
        (the new state's step), without waiting for them."""
        self._record = _updated(self._record, metrics, step)

    @property
    def record(self) -> dict[str, jax.Array]:
        """The record as of the steps dispatched so far (for `check`)."""
        return self._record

    def check(
        self,
        last_checkpoint: int | None,
        record: dict[str, jax.Array] | None = None,
    ) -> None:
        """Waits for the steps dispatched so far (those up to an earlier
        `record`); raises FloatingPointError naming the first non-finite one
        and `last_checkpoint` (the newest saved step; None: none yet), as
        `MetricsLog.check_finite` words it.
        """
        record = jax.device_get(self._record if record is None else record)
        step = int(record["step"])
        if step == NONE_YET:
            return
        train_metrics.MetricsLog.check_finite(
            step,
            record["total"],
            record["grad_norm"],
            record["state_finite"],
            last_checkpoint=last_checkpoint,
        )
        # check_finite's tests are the device's: it has raised by now.
        raise FloatingPointError(f"step {step} was non-finite; stopping")
