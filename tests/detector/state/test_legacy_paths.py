"""legacy_paths.py: checkpoints with the old head paths restore converted."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.build.model import build_model
from detector.state import checkpoint, legacy_paths, warm_start
from detector.state.optimizer import path_name
from tests.detector import helpers


def _current_tree(value: float) -> dict:
    """A tree of today's layout: heads under their parts, everywhere a
    param tree sits (params, an optimizer slot)."""
    model = {
        "backbone": {"conv": {"kernel": jnp.full((2,), value)}},
        "rpn": {"head": {"conv": {"kernel": jnp.full((3,), value)}}},
        "box_branch": {"head": {"fc1": {"bias": jnp.full((4,), value)}}},
        "mask_branch": {"head": {"logits": {"bias": jnp.full((5,), value)}}},
    }
    return {
        "step": jnp.int32(7),
        "params": model,
        "opt_state": {"0": {"mu": jax.tree.map(jnp.zeros_like, model)}},
    }


def _names(tree) -> set[str]:
    return {
        path_name(path) for path, _ in jax.tree_util.tree_leaves_with_path(tree)
    }


def test_the_old_names_of_each_head():
    old = _names(legacy_paths.to_legacy(_current_tree(1.0)))
    assert {
        "params/rpn_head/conv/kernel",
        "params/box_head/fc1/bias",
        "params/mask_head/logits/bias",
        "opt_state/0/mu/box_head/fc1/bias",
        "params/backbone/conv/kernel",
    } <= old
    assert legacy_paths.is_legacy(old)
    assert not legacy_paths.is_legacy(_names(_current_tree(1.0)))
    assert {legacy_paths.current_name(n) for n in old} == _names(
        _current_tree(1.0)
    )


def test_to_current_inverts_to_legacy():
    tree = _current_tree(2.0)
    back = legacy_paths.to_current(legacy_paths.to_legacy(tree))
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_model_holds_each_renamed_head():
    """Every head RENAMED names is a part of today's model."""
    config = helpers.tiny_config()
    model = nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))
    names = {
        "/".join(map(str, path))
        for path, _ in nnx.to_flat_state(nnx.state(model))
    }
    for part, attribute in legacy_paths.RENAMED.values():
        assert any(n.startswith(f"{part}/{attribute}/") for n in names), part
    assert not legacy_paths.is_legacy(names)


def test_an_old_checkpoint_restores_under_the_current_paths(tmp_path, caplog):
    old = legacy_paths.to_legacy(_current_tree(3.0))
    writer = checkpoint.Checkpointer(tmp_path, max_to_keep=1)
    writer.save(7, old)
    writer.close()
    reader = checkpoint.Checkpointer(tmp_path, max_to_keep=1, create=False)
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _current_tree(0.0)
    )
    try:
        with caplog.at_level(logging.INFO):
            step, tree = reader.restore_latest(abstract)
    finally:
        reader.close()
    assert step == 7
    assert _names(tree) == _names(abstract)
    np.testing.assert_array_equal(
        tree["params"]["box_branch"]["head"]["fc1"]["bias"], np.full((4,), 3.0)
    )
    assert any("old paths" in r.getMessage() for r in caplog.records)


def test_a_warm_start_reads_an_old_checkpoint_by_the_current_names(tmp_path):
    tree = _current_tree(4.0)
    old = legacy_paths.to_legacy({"params": tree["params"], "rest": {}})
    writer = checkpoint.Checkpointer(tmp_path / "checkpoints", max_to_keep=1)
    writer.save(7, old)
    writer.close()
    shapes = {"rpn/head/conv/kernel": (3,), "box_branch/head/fc1/bias": (4,)}
    arrays = warm_start.from_checkpoint(str(tmp_path), shapes, num_classes=3)
    assert set(arrays) == set(shapes)
    np.testing.assert_array_equal(
        arrays["box_branch/head/fc1/bias"], np.full((4,), 4.0)
    )
