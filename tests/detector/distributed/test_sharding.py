"""Placement: batches, replicated state and predict outputs on the mesh."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from detector.distributed import sharding


def test_put_batch_and_local_rows_round_trip():
    mesh = sharding.make_mesh()
    rows = np.arange(2 * mesh.size * 3).reshape(2 * mesh.size, 3)
    with jax.transfer_guard("disallow"):
        placed = sharding.put_batch({"image": rows}, mesh, keys=("image",))
    assert placed["image"].sharding.spec == jax.sharding.PartitionSpec("data")
    np.testing.assert_array_equal(
        sharding.local_rows(placed, mesh)["image"], rows
    )


def test_replicate_places_arrays_keys_and_scalars_everywhere():
    mesh = sharding.make_mesh()
    tree = {"w": jnp.ones(3), "step": np.int32(7), "key": jax.random.key(5)}
    with jax.transfer_guard("disallow"):
        placed = sharding.replicate(tree, mesh)
    for leaf in jax.tree.leaves(placed):
        assert leaf.sharding.is_fully_replicated
        assert len(leaf.sharding.device_set) == mesh.size
    np.testing.assert_array_equal(
        jax.random.key_data(placed["key"]),
        jax.random.key_data(jax.random.key(5)),
    )
    assert int(jax.device_get(placed["step"])) == 7


def test_check_divisible_names_the_key_and_devices():
    mesh = sharding.make_mesh()
    sharding.check_divisible("train.batch_size", mesh.size, mesh)
    with pytest.raises(
        ValueError,
        match=r"config.train.batch_size=0 must be "
        r"a positive multiple of the number of devices",
    ):
        sharding.check_divisible("train.batch_size", 0, mesh)
