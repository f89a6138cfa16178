"""torchvision's GeneralizedRCNNTransform resizing GT masks in training,
written for test_gt_masks_torchvision.py (run in a child process: torch).

    python tests/detector/data/torchvision_mask_resize.py --out=F.npz

For each (height, width) of SIZES: random binary masks (numpy, seeded) and
the masks, boxes and image size torchvision's training transform makes of
them at min_size MIN_SIZE, max_size MAX_SIZE.
"""

import argparse

import numpy as np
import torch
from torchvision.models.detection import transform as tv_transform

SIZES = ((37, 53), (480, 640), (427, 640), (333, 500), (61, 1000))
MIN_SIZE, MAX_SIZE = 200, 333
INSTANCES = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    rng = np.random.default_rng(0)
    transform = tv_transform.GeneralizedRCNNTransform(
        MIN_SIZE, MAX_SIZE, [0.0] * 3, [1.0] * 3
    )
    transform.train()
    arrays = {}
    for i, (height, width) in enumerate(SIZES):
        masks = (rng.random((INSTANCES, height, width)) < 0.3).astype(np.uint8)
        boxes = np.tile([[0.0, 0.0, width, height]], (INSTANCES, 1))
        image = torch.zeros(3, height, width)
        target = {
            "boxes": torch.tensor(boxes, dtype=torch.float32),
            "masks": torch.from_numpy(masks),
        }
        resized, target = transform.resize(image, target)
        arrays[f"masks_{i}"] = masks
        arrays[f"resized_{i}"] = target["masks"].numpy()
        arrays[f"size_{i}"] = np.asarray(resized.shape[-2:], np.int32)
    np.savez(out, **arrays)


if __name__ == "__main__":
    main()
