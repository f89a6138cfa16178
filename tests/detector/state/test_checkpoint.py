"""checkpoint.py: a step removed while a reader restores it is skipped."""

import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np

from detector.state import checkpoint


def _tree(value):
    return {"params": {"w": jnp.full((4, 3), value, jnp.float32)}}


def test_a_step_removed_after_listing_falls_back_to_the_next(tmp_path, caplog):
    writer = checkpoint.Checkpointer(tmp_path, max_to_keep=5)
    for step in (1, 2):
        writer.save(step, _tree(float(step)))
    writer.close()
    reader = checkpoint.Checkpointer(tmp_path, max_to_keep=1, create=False)
    try:
        assert reader.latest_step() == 2  # listed ...
        shutil.rmtree(tmp_path / "2")  # ... then removed by a trainer
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _tree(0.0)
        )
        with caplog.at_level(logging.INFO):
            step, tree = reader.restore_latest(abstract)
    finally:
        reader.close()
    assert step == 1
    np.testing.assert_array_equal(tree["params"]["w"], np.ones((4, 3)))
    removed = [
        r for r in caplog.records if "was removed while" in r.getMessage()
    ]
    assert len(removed) == 1 and "/2 " in removed[0].getMessage()
    assert not any("damaged" in r.getMessage() for r in caplog.records)
