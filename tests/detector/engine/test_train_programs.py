"""The train step per canvas: compiled and audited for each canvas before
step 1, each call run by the program of its batch's canvas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from detector.distributed import sharding
from detector.engine import train_programs


def _sharded_batch(canvas):
    mesh = sharding.make_mesh()
    batch = {
        "image": np.ones((mesh.size, *canvas, 3), np.float32),
        "image_size": np.tile(np.int32(canvas), (mesh.size, 1)),
    }
    return sharding.put_batch(batch, mesh, keys=tuple(batch))


def test_each_canvas_gets_a_program_of_its_own_shape():
    @jax.jit
    def step(state, batch, key):
        pixels = batch["image"].sum(axis=(1, 2, 3))
        return state + 1, {"sum": pixels.sum() + key}

    batch = _sharded_batch((64, 128))
    programs, findings = train_programs.compile_per_canvas(
        step,
        jnp.zeros(()),
        batch,
        jnp.ones(()),
        ((128, 64), (64, 128)),
        strict=True,
        advice=None,
    )
    assert findings == []
    # The first batch's canvas first, then the others.
    assert list(programs.programs) == [(64, 128), (128, 64)]
    images = sharding.make_mesh().size
    for canvas in programs.programs:
        state, metrics = programs(jnp.zeros(()), _sharded_batch(canvas), 1.0)
        assert float(state) == 1.0
        assert float(metrics["sum"]) == images * 3 * 64 * 128 + 1
    one, _ = train_programs.compile_per_canvas(
        step,
        jnp.zeros(()),
        batch,
        jnp.ones(()),
        ((64, 128),),
        strict=False,
        advice=None,
    )
    assert list(one.programs) == [(64, 128)]


def test_a_batch_on_no_compiled_canvas_is_one_clear_error():
    programs = train_programs.TrainPrograms({(64, 128): None}, "train_step")
    batch = {"image": np.zeros((2, 96, 96, 3), np.float32)}
    with pytest.raises(
        ValueError,
        match=r"^images on 96x96 have no compiled train_step "
        r"\(canvases: 64x128\)$",
    ):
        programs(None, batch, None)
