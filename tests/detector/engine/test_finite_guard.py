"""FiniteGuard: the first non-finite step, kept on the device across steps
and named, with the last checkpoint, when the host checks."""

import jax.numpy as jnp
import numpy as np
import pytest

from detector.distributed import sharding
from detector.engine import finite_guard
from detector.engine import train_step as step_lib


def _step(mesh, guard, step, total=1.5, grad_norm=2.0, state_finite=True):
    metrics = sharding.replicate(
        {
            "total": np.float32(total),
            "grad_norm": np.float32(grad_norm),
            step_lib.STATE_FINITE: np.bool_(state_finite),
        },
        mesh,
    )
    guard.update(metrics, sharding.replicate(jnp.int32(step), mesh))


def test_the_first_bad_step_is_named_not_a_later_one():
    mesh = sharding.make_mesh()
    guard = finite_guard.FiniteGuard(mesh)
    _step(mesh, guard, 1)
    _step(mesh, guard, 2)
    guard.check(last_checkpoint=None)  # all finite: no error
    _step(mesh, guard, 3, total=np.nan)
    _step(mesh, guard, 4, grad_norm=np.inf)
    with pytest.raises(
        FloatingPointError,
        match=r"^total loss is nan at step 3; stopping; checkpoint 2, saved "
        r"before it, is intact$",
    ):
        guard.check(last_checkpoint=2)


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"grad_norm": np.inf}, r"gradient norm is inf at step 5 \(total "),
        ({"state_finite": False}, r"the update of step 5 made weights non-"),
    ],
)
def test_a_finite_loss_with_a_bad_gradient_or_weights_stops_too(bad, words):
    mesh = sharding.make_mesh()
    guard = finite_guard.FiniteGuard(mesh)
    _step(mesh, guard, 5, **bad)
    with pytest.raises(FloatingPointError, match=words + r".*no checkpoint"):
        guard.check(last_checkpoint=None)


def test_a_record_taken_earlier_checks_the_steps_up_to_it_only():
    """A log step's line is written once the step after it is dispatched:
    its check reads the record as of the log step."""
    mesh = sharding.make_mesh()
    guard = finite_guard.FiniteGuard(mesh)
    _step(mesh, guard, 1)
    logged = guard.record
    _step(mesh, guard, 2, total=np.nan)
    guard.check(last_checkpoint=None, record=logged)  # step 1: finite
    with pytest.raises(FloatingPointError, match=r"nan at step 2"):
        guard.check(last_checkpoint=None)
