"""Data parallelism: one 'data' mesh axis over every device, listed process
by process; batches sharded, state replicated, every placement explicit."""

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# Batch entries the model reads; the rest (ids, sizes) stay on the host.
MODEL_INPUTS = (
    "image",
    "image_size",
    "boxes",
    "classes",
    "valid",
    "masks",
    "mask_valid",
)


def make_mesh(devices: Sequence[Any] | None = None) -> Mesh:
    """A one-axis ('data') mesh over every device of every process.

    The devices are listed process by process, so each process's devices
    hold one contiguous block of the batch.

    Args:
      devices: the devices to lay out (default: `jax.devices()`), e.g. a
        TPU topology's for a compile ahead of time (docs/tpu.md).
    """
    devices = jax.devices() if devices is None else devices
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))
    return Mesh(np.asarray(devices), ("data",))


def _put_rows(rows: np.ndarray, data_sharding: NamedSharding) -> jax.Array:
    """This process's rows -> one global array, by explicit device_puts."""
    global_shape = (rows.shape[0] * jax.process_count(), *rows.shape[1:])
    first_row = jax.process_index() * rows.shape[0]
    shards = []
    for device, index in data_sharding.addressable_devices_indices_map(
        global_shape
    ).items():
        rows_here = range(global_shape[0])[index[0]]
        block = slice(rows_here.start - first_row, rows_here.stop - first_row)
        shards.append(jax.device_put(rows[block], device))
    return jax.make_array_from_single_device_arrays(
        global_shape, data_sharding, shards
    )


def put_batch(
    batch: dict[str, np.ndarray], mesh: Mesh, keys: Sequence[str] = MODEL_INPUTS
) -> dict[str, jax.Array]:
    """This process's rows of the global batch -> arrays sharded on 'data'."""
    data_sharding = NamedSharding(mesh, P("data"))
    return {k: _put_rows(np.asarray(batch[k]), data_sharding) for k in keys}


def check_divisible(key: str, size: int, mesh: Mesh) -> None:
    """A global batch size must split evenly over the devices (processes).

    Raises:
      ValueError: naming `key`, the device count and the process count.
    """
    if size <= 0 or size % mesh.size:
        processes = jax.process_count()
        where = (
            f"{mesh.size} devices in {processes} processes"
            if processes > 1
            else f"{mesh.size} devices"
        )
        raise ValueError(
            f"config.{key}={size} must be a positive multiple "
            f"of the number of devices ({where})"
        )


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Places a pytree on every device of the mesh (every process's copy).

    Each process puts its own value on its own devices, so the values must
    be equal on every process (the same seed, the same restored step).
    """
    replicated = NamedSharding(mesh, P())

    def put(x):
        if jax.dtypes.issubdtype(
            getattr(x, "dtype", None), jax.dtypes.prng_key
        ):
            # Typed keys: place the key data, then wrap it again.
            return jax.random.wrap_key_data(
                put(jax.random.key_data(x)), impl=jax.random.key_impl(x)
            )
        copies = [
            jax.device_put(x, device)
            for device in replicated.addressable_devices
        ]
        return jax.make_array_from_single_device_arrays(
            np.shape(x), replicated, copies
        )

    return jax.tree.map(put, tree)


def local_rows(tree: Any, mesh: Mesh) -> Any:
    """This process's rows of a pytree sharded over 'data', as numpy."""
    local = multihost_utils.global_array_to_host_local_array(
        tree, mesh, P("data")
    )
    return jax.device_get(local)
