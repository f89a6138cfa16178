"""The uncompressed RLE (no pycocotools) decodes to the mask it encodes."""

import numpy as np
import pytest

from detector.runtime import masks


@pytest.mark.parametrize("first", [False, True])
def test_uncompressed_rle_round_trips_through_pycocotools(first):
    mask_utils = pytest.importorskip("pycocotools.mask")
    mask = np.random.default_rng(int(first)).random((7, 5)) > 0.5
    mask[0, 0] = first
    rle = masks.uncompressed_rle(mask)
    assert rle["size"] == [7, 5] and sum(rle["counts"]) == 35
    assert (rle["counts"][0] == 0) == first
    decoded = mask_utils.decode(mask_utils.frPyObjects(rle, 7, 5))
    np.testing.assert_array_equal(decoded, mask)
    compressed = masks.encode_rle(mask)
    np.testing.assert_array_equal(mask_utils.decode(compressed), mask)
