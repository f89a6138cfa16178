"""Data parallelism: the device mesh and explicit placement of batches/state.

One mesh axis, 'data', over every device of every process: batches are
sharded along it, the training state is replicated. All placement here is
an explicit transfer, so it works under `jax.transfer_guard("disallow")`.
"""

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# Batch entries the model reads; the rest (ids, sizes) stay on the host.
MODEL_INPUTS = ("image", "boxes", "classes", "valid", "masks", "mask_valid")


def make_mesh() -> Mesh:
    """A one-axis ('data') mesh over every device of every process."""
    return Mesh(np.asarray(jax.devices()), ("data",))


def put_batch(batch: dict[str, np.ndarray], mesh: Mesh,
              keys: Sequence[str] = MODEL_INPUTS) -> dict[str, jax.Array]:
    """This process's batch -> global arrays sharded over 'data'."""
    data_sharding = NamedSharding(mesh, P("data"))
    return {k: jax.make_array_from_process_local_data(data_sharding, batch[k])
            for k in keys}


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Places a pytree on every device of the mesh."""
    return jax.device_put(tree, NamedSharding(mesh, P()))
