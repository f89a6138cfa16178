"""legacy_paths.py: checkpoints of each older head layout restore
converted."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from detector.factory import build_model
from detector.state import checkpoint, legacy_paths, warm_start
from detector.state.optimizer import path_name
from tests.detector import helpers

TOP_LEVEL, BRANCHES = legacy_paths.LAYOUTS


def _current_tree(value: float) -> dict:
    """A tree of today's layout: the heads under rpn and roi_heads,
    everywhere a param tree sits (params, an optimizer slot)."""
    model = {
        "backbone": {"conv": {"kernel": jnp.full((2,), value)}},
        "rpn": {"head": {"conv": {"kernel": jnp.full((3,), value)}}},
        "roi_heads": {
            "box_head": {"fc1": {"bias": jnp.full((4,), value)}},
            "mask_head": {"logits": {"bias": jnp.full((5,), value)}},
        },
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


@pytest.mark.parametrize(
    "layout, names",
    [
        (
            TOP_LEVEL,
            {
                "params/rpn_head/conv/kernel",
                "params/box_head/fc1/bias",
                "params/mask_head/logits/bias",
                "opt_state/0/mu/box_head/fc1/bias",
                "params/backbone/conv/kernel",
            },
        ),
        (
            BRANCHES,
            {
                "params/rpn/head/conv/kernel",
                "params/box_branch/head/fc1/bias",
                "params/mask_branch/head/logits/bias",
                "opt_state/0/mu/box_branch/head/fc1/bias",
                "params/backbone/conv/kernel",
            },
        ),
    ],
)
def test_the_old_names_of_each_head(layout, names):
    old = _names(legacy_paths.to_legacy(_current_tree(1.0), layout))
    assert names <= old
    assert legacy_paths.layout_of(old) == layout
    assert legacy_paths.layout_of(_names(_current_tree(1.0))) is None
    assert {legacy_paths.current_name(n) for n in old} == _names(
        _current_tree(1.0)
    )


@pytest.mark.parametrize("layout", legacy_paths.LAYOUTS)
def test_to_current_inverts_to_legacy(layout):
    tree = _current_tree(2.0)
    old = legacy_paths.to_legacy(tree, layout)
    assert _names(old) != _names(tree)
    back = legacy_paths.to_current(old, layout)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_model_holds_each_renamed_head():
    """Every head a layout renames is a part of today's model."""
    config = helpers.tiny_config()
    model = nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))
    names = {
        "/".join(map(str, path))
        for path, _ in nnx.to_flat_state(nnx.state(model))
    }
    for renames in legacy_paths.LAYOUTS.values():
        for current in renames.values():
            prefix = "/".join(current) + "/"
            assert any(n.startswith(prefix) for n in names), prefix
    assert legacy_paths.layout_of(names) is None


@pytest.mark.parametrize("layout", legacy_paths.LAYOUTS)
def test_an_old_checkpoint_restores_under_the_current_paths(
    tmp_path, caplog, layout
):
    old = legacy_paths.to_legacy(_current_tree(3.0), layout)
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
        tree["params"]["roi_heads"]["box_head"]["fc1"]["bias"],
        np.full((4,), 3.0),
    )
    assert any("old paths" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("layout", legacy_paths.LAYOUTS)
def test_a_warm_start_reads_an_old_checkpoint_by_the_current_names(
    tmp_path, layout
):
    tree = _current_tree(4.0)
    old = legacy_paths.to_legacy({"params": tree["params"], "rest": {}}, layout)
    writer = checkpoint.Checkpointer(tmp_path / "checkpoints", max_to_keep=1)
    writer.save(7, old)
    writer.close()
    shapes = {
        "rpn/head/conv/kernel": (3,),
        "roi_heads/box_head/fc1/bias": (4,),
    }
    arrays = warm_start.from_checkpoint(str(tmp_path), shapes, num_classes=3)
    assert set(arrays) == set(shapes)
    np.testing.assert_array_equal(
        arrays["roi_heads/box_head/fc1/bias"], np.full((4,), 4.0)
    )
