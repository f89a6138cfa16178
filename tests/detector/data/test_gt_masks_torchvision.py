"""The canvas GT mask layout against torchvision's own resize of the masks
(GeneralizedRCNNTransform in training, torchvision_mask_resize.py in a
child process): the same bits at every pixel of five image sizes, zero
past the image."""

import numpy as np
import tensorflow as tf

from detector.data import gt_masks, transforms
from tests.detector.data import test_transforms as geometry
from tests.helpers import torch_process

SCRIPT = "tests/detector/data/torchvision_mask_resize.py"
CANVAS = (224, 352)  # holds every resized image of the script's sizes


@torch_process.needs_torch
def test_canvas_masks_are_torchvisions_resized_masks(tmp_path):
    out = tmp_path / "resized.npz"
    torch_process.run([SCRIPT, f"--out={out}"])
    theirs = np.load(out)
    data = geometry._shortest_edge(min_size=(200,), max_size=333, canvas=CANVAS)
    data.hflip = False
    data.max_instances = 4
    count = len([k for k in theirs if k.startswith("masks_")])
    assert count == 5
    for i in range(count):
        masks = theirs[f"masks_{i}"]
        height, width = masks.shape[1:]
        example = {
            "image": tf.zeros([height, width, 3], tf.uint8),
            "image_id": tf.constant(i, tf.int64),
            "boxes": tf.constant([[0, 0, width, height]] * 3, tf.float32),
            "classes": tf.constant([1, 2, 3], tf.int32),
            "masks": tf.constant(masks),
        }
        ours = transforms.transform(
            example,
            tf.constant([i, 1], tf.int64),
            data,
            True,
            gt_masks.GtMasks("canvas", True),
        )
        size = tuple(ours["image_size"].numpy())
        assert size == tuple(theirs[f"size_{i}"]), (i, size)
        placed = np.unpackbits(ours["masks"].numpy(), axis=-1)[..., : CANVAS[1]]
        resized = theirs[f"resized_{i}"]
        np.testing.assert_array_equal(
            placed[:3, : size[0], : size[1]], resized, err_msg=f"image {i}"
        )
        assert (
            not placed[:3, size[0] :].any()
            and not placed[:, :, size[1] :].any()
        )
        assert not placed[3].any()
