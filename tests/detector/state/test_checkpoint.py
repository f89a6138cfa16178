"""checkpoint.py: a step removed while a reader restores it is skipped."""

import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def _host_and_device_fingerprints(tree):
    """(checksums, finite) by `_fingerprint_tree` of `tree` placed on a CPU
    device (the NumPy path) and by the device program on the default
    device (a GPU's own program where there is one)."""
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # e.g. JAX_PLATFORMS names no cpu
        pytest.skip("no CPU device: no array can sit in host memory")
    host_tree = jax.device_put(tree, cpu)
    assert all(map(checkpoint._in_host_memory, jax.tree.leaves(host_tree)))
    leaves = jax.device_put(jax.tree.leaves(tree), jax.devices()[0])
    sums, finite = jax.device_get(checkpoint._fingerprints(leaves))
    names = sorted(tree)  # the flattening order of a dict
    device = (
        {
            n: f"{int(a):08x}{int(b):08x}"
            for n, (a, b) in zip(names, sums, strict=True)
        },
        dict(zip(names, map(bool, finite), strict=True)),
    )
    return checkpoint._fingerprint_tree(host_tree), device


def test_host_fingerprints_equal_the_device_program():
    """Arrays in host memory are checksummed by NumPy: the values the
    device program gives, for every kind of word, and the same verdict on
    non-finite values."""
    host, device = _host_and_device_fingerprints(
        {
            "f32": jnp.linspace(-1, 1, 1000).at[7].set(jnp.nan),
            "bf16": jnp.full((7, 3), -2.5, jnp.bfloat16),
            "f16": jnp.ones((5,), jnp.float16).at[0].set(jnp.inf),
            "i32": jnp.arange(-5, 300_000),
            "u8": jnp.arange(200, dtype=jnp.uint8),
            "flag": jnp.array([True, False, True]),
            "scalar": jnp.float32(3.5),
            "key": jax.random.key(7),
        }
    )
    assert host == device
    assert [n for n, ok in host[1].items() if not ok] == ["f16", "f32"]
    with jax.enable_x64(True):  # two words per element
        host, device = _host_and_device_fingerprints(
            {
                "f64": jnp.linspace(-1, 1, 100, dtype=jnp.float64),
                "i64": jnp.arange(-3, 50, dtype=jnp.int64),
            }
        )
    assert host == device


def test_a_save_into_a_file_is_one_save_error(tmp_path):
    """checkpoints/ a file: the save's error is the one-line save error,
    not an OSError from listing the checkpoints beside it."""
    (tmp_path / "checkpoints").write_text("")
    ckpt = checkpoint.Checkpointer(tmp_path / "checkpoints", max_to_keep=1)
    ckpt.save(1, {"a": jnp.ones(3)})
    with pytest.raises(checkpoint.CheckpointSaveError) as info:
        ckpt.wait()
    ckpt.close()
    assert str(info.value).startswith(
        f"the checkpoint of step 1 could not be written to "
        f"{tmp_path}/checkpoints: Not a directory; "
    )
    assert str(info.value).endswith(" free there; no earlier checkpoint")


@pytest.mark.parametrize(
    "text",
    [
        "Error writing local file: File too large [os_error_code=27]",
        # The text before the code may quote what was written.
        "Error writing \"{'committed': true}'] [os_error_code=27] "
        "[source locations='tensorstore/kvstore/file/file_key_value_store.cc']",
    ],
)
def test_a_failed_write_is_named_by_its_os_error_code(text):
    assert checkpoint._save_reason(ValueError(text)) == "File too large"
