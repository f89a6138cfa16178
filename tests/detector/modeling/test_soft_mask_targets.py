"""The `torchvision` mask target rule (modeling/mask_targets.soft_targets)
and RoIHeads' mask loss on it, against torchvision's own: roi_align on the
image-sized GT mask as torchvision's maskrcnn_loss calls it (spatial_scale
1, sampling_ratio -1, aligned=False), and maskrcnn_loss itself. Images
smaller than their canvas, rois that reach the image's last row and
column. CPU, float32: targets within 1e-5 (summation order; 3.8e-6
measured), the loss within 1e-6 relative.
"""

import jax
import numpy as np

from detector.modeling import mask_targets, roi_heads
from tests.helpers import torch_process

CANVAS = (48, 64)
IMAGES = ((37, 51), (48, 64))  # the first smaller than its canvas
M = 14
TOLERANCE = 1e-5  # measured 3.8e-6


def _case():
    """Masks u8[2, 2, 48, 64] (zero past each image), rois f32[2, 6, 4],
    matched i32[2, 6]."""
    rng = np.random.default_rng(3)
    masks = np.zeros((2, 2, *CANVAS), np.uint8)
    rois = np.zeros((2, 6, 4), np.float32)
    for b, (height, width) in enumerate(IMAGES):
        masks[b, :, :height, :width] = rng.random((2, height, width)) < 0.5
        x1 = rng.uniform(0, width - 8, 4)
        y1 = rng.uniform(0, height - 8, 4)
        x2 = np.minimum(x1 + rng.uniform(2, 40, 4), width)
        y2 = np.minimum(y1 + rng.uniform(2, 40, 4), height)
        rois[b, :4] = np.stack([x1, y1, x2, y2], -1)
        # To the image's last row and column, and the whole image.
        rois[b, 4] = [width - 9.3, height - 7.6, width, height]
        rois[b, 5] = [0, 0, width, height]
    matched = rng.integers(0, 2, (2, 6)).astype(np.int32)
    return masks, rois, matched


def _ours(masks, rois, matched, image_sizes):
    with jax.default_device(jax.devices("cpu")[0]):
        return np.asarray(
            mask_targets.soft_targets(
                rois,
                matched,
                None,
                np.packbits(masks, axis=-1),
                image_sizes,
                mask_size=M,
                sampling_ratio=0,
            )
        )


@torch_process.imports_torch
def test_soft_targets_are_torchvisions_roi_align_of_the_image_mask():
    import torch
    from torchvision.ops import roi_align

    masks, rois, matched = _case()
    ours = _ours(masks, rois, matched, np.asarray(IMAGES, np.int32))
    for b, (height, width) in enumerate(IMAGES):
        image_masks = torch.from_numpy(masks[b, :, :height, :width])
        gt = image_masks[torch.from_numpy(matched[b]).long()]
        theirs = roi_align(
            gt[:, None].float(),
            torch.cat(
                [torch.arange(6)[:, None].float(), torch.from_numpy(rois[b])],
                dim=1,
            ),
            (M, M),
            1.0,
            -1,
            False,
        )[:, 0].numpy()
        np.testing.assert_allclose(ours[b], theirs, rtol=0, atol=TOLERANCE)
        if (height, width) != CANVAS:
            # The canvas as the extent moves the roi at the image's edge.
            canvas = _ours(
                masks[b : b + 1], rois[b : b + 1], matched[b : b + 1], None
            )
            assert np.abs(canvas[0, 4] - theirs[4]).max() > 1e-2


class _FixedLogits:
    """A mask head that returns given logits f32[B, R, M, M, C]."""

    mask_size = M

    def __init__(self, logits: np.ndarray):
        self.logits = logits

    def __call__(self, pooled, is_valid):
        del pooled, is_valid
        return self.logits


@torch_process.imports_torch
def test_mask_loss_is_torchvisions_maskrcnn_loss_at_each_image_size():
    """RoIHeads.mask_loss with the `torchvision` rule (the batch's masks on
    the canvas, its image sizes) against torchvision's own maskrcnn_loss
    on the image-sized masks, the same rois, labels and logits."""
    import torch
    from torchvision.models.detection import roi_heads as tv_roi_heads

    masks, rois, matched = _case()
    classes = 3
    rng = np.random.default_rng(5)
    labels = rng.integers(1, classes + 1, (2, 2)).astype(np.int32)
    roi_labels = np.take_along_axis(labels, matched, axis=1)
    logits = rng.standard_normal((2, 6, M, M, classes)).astype(np.float32)
    heads = roi_heads.RoIHeads(
        None,
        _FixedLogits(logits),
        sampling=None,
        pooling=roi_heads.PoolOptions(2, 224.0, 4),
        detection=None,
        box_beta=0.0,
        num_mask_rois=6,
        mask_target="torchvision",
    )
    targets = roi_heads.RoiTargets(
        rois=rois,
        is_valid=np.ones((2, 6), bool),
        classes=roi_labels,
        matched=matched,
        box_targets=np.zeros((2, 6, 4), np.float32),
    )

    def ours(image_sizes):
        batch = {
            "masks": np.packbits(masks, axis=-1),
            "mask_valid": np.ones((2, 2), bool),
            "boxes": np.zeros((2, 2, 4), np.float32),
            "image_size": image_sizes,
        }
        with jax.default_device(jax.devices("cpu")[0]):
            return float(heads.mask_loss(None, targets, batch))

    # torchvision's logits have a channel per class, background first.
    theirs_logits = np.concatenate(
        [np.zeros((2, 6, M, M, 1), np.float32), logits], axis=-1
    ).transpose(0, 1, 4, 2, 3)
    theirs = float(
        tv_roi_heads.maskrcnn_loss(
            torch.from_numpy(theirs_logits.reshape(12, classes + 1, M, M)),
            [torch.from_numpy(rois[b]) for b in range(2)],
            [
                torch.from_numpy(masks[b, :, :height, :width])
                for b, (height, width) in enumerate(IMAGES)
            ],
            [torch.from_numpy(labels[b]).long() for b in range(2)],
            [torch.from_numpy(matched[b]).long() for b in range(2)],
        )
    )
    at_images = ours(np.asarray(IMAGES, np.int32))
    assert abs(at_images - theirs) <= 1e-6 * abs(theirs), (at_images, theirs)
    at_canvas = ours(np.asarray([CANVAS, CANVAS], np.int32))
    assert abs(at_canvas - theirs) > 1e-5 * abs(theirs)
