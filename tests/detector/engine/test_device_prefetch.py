"""device_prefetch.ahead: batches put `count` steps early, in order."""

import numpy as np

from detector.distributed import sharding
from detector.engine import device_prefetch


def test_batches_come_in_order_each_put_count_batches_early(monkeypatch):
    put = []

    def recording(batch, mesh):
        put.append(batch["image"])
        return batch

    monkeypatch.setattr(sharding, "put_batch", recording)
    batches = ({"image": i} for i in range(5))
    taken = device_prefetch.ahead(batches, mesh=None, count=2)
    assert next(taken) == {"image": 0}
    assert put == [0, 1, 2]  # batches 1 and 2 are on the device already
    assert next(taken) == {"image": 1}
    assert put == [0, 1, 2, 3]
    assert [b["image"] for b in taken] == [2, 3, 4]


def test_put_batch_arrays_are_device_arrays_on_the_mesh():
    mesh = sharding.make_mesh()
    batch = {
        k: np.zeros((mesh.size, 2), np.float32) for k in sharding.MODEL_INPUTS
    }
    (first,) = device_prefetch.ahead(iter([batch]), mesh, count=2)
    assert set(first) == set(sharding.MODEL_INPUTS)
    assert all(a.sharding.mesh == mesh for a in first.values())
