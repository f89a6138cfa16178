"""fixed_batch.padded: every batch runs at the batch size, one program per
canvas, and says so once per canvas."""

import io

import numpy as np

from detector.imaging import images
from detector.predict import fixed_batch, runner


def test_a_smaller_batch_is_padded_and_only_its_own_outputs_come_back():
    calls = []

    def run(batch, resized, sizes):
        calls.append((batch.shape, resized.tolist()))
        return {"scores": batch[:, 0, 0, 0] + 1, "num_valid": sizes[:, 0]}

    predictor = runner.Predictor(images.Resize("letterbox"), ((4, 4),), [], run)
    stream = io.StringIO()
    fixed = fixed_batch.padded(predictor, 3, stream=stream)
    full = np.arange(3, dtype=np.float32)[:, None, None, None] * np.ones(
        (3, 4, 4, 3), np.float32
    )
    sizes = np.int32([[10, 10], [20, 20], [30, 30]])
    out = fixed.run(full, sizes, sizes)
    np.testing.assert_array_equal(out["scores"], [1, 2, 3])
    out = fixed.run(full[2:], sizes[2:], sizes[2:])  # the last image alone
    np.testing.assert_array_equal(out["scores"], [3])
    np.testing.assert_array_equal(out["num_valid"], [30])
    assert [shape for shape, _ in calls] == [(3, 4, 4, 3)] * 2
    assert calls[1][1] == [[30, 30]] * 3
    assert stream.getvalue() == fixed_batch.COMPILING + "\n"
    fixed_batch.padded(predictor, 3, quiet=True, stream=stream).run(
        full, sizes, sizes
    )
    assert stream.getvalue() == fixed_batch.COMPILING + "\n"
