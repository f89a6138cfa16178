"""Written by benchmarks/tpu_aot.py --fit --write_fit: the TPU compiler's
HBM use of each measured config's train step per chip kind, read by
tpu_fit.py (docs/tpu.md). Edit by running the benchmark again."""

import json

FITS: list[dict] = json.loads(
    """
[
  {
    "config": "coco_r50_fpn",
    "device_kind": "TPU v5 lite",
    "fixed_bytes": 746980608,
    "max_batch_per_chip": 10,
    "measured_batch": 8,
    "per_image_bytes": 1417588960,
    "signature": {
      "data.group_orientations": true,
      "data.gt_mask_size": 112,
      "data.image_size": [
        832,
        1344
      ],
      "data.max_instances": 100,
      "data.train_image_size": [
        0,
        0
      ],
      "model.backbone": "resnet50",
      "model.dtype": "bfloat16",
      "model.fpn_norm": "auto",
      "model.loss.mask_target": "crop",
      "model.norm": "frozen_batch"
    },
    "versions": "JAX 0.10.2 (jaxlib 0.10.2), libtpu 0.0.42.1"
  },
  {
    "config": "coco_r50_fpn",
    "device_kind": "TPU v6 lite",
    "fixed_bytes": 740991232,
    "max_batch_per_chip": 21,
    "measured_batch": 8,
    "per_image_bytes": 1429619008,
    "signature": {
      "data.group_orientations": true,
      "data.gt_mask_size": 112,
      "data.image_size": [
        832,
        1344
      ],
      "data.max_instances": 100,
      "data.train_image_size": [
        0,
        0
      ],
      "model.backbone": "resnet50",
      "model.dtype": "bfloat16",
      "model.fpn_norm": "auto",
      "model.loss.mask_target": "crop",
      "model.norm": "frozen_batch"
    },
    "versions": "JAX 0.10.2 (jaxlib 0.10.2), libtpu 0.0.42.1"
  },
  {
    "config": "coco_r50_fpn_lsj",
    "device_kind": "TPU v5 lite",
    "fixed_bytes": 849462016,
    "max_batch_per_chip": 7,
    "measured_batch": 8,
    "per_image_bytes": 2065930464,
    "signature": {
      "data.group_orientations": false,
      "data.gt_mask_size": 112,
      "data.image_size": [
        1024,
        1024
      ],
      "data.max_instances": 100,
      "data.train_image_size": [
        0,
        0
      ],
      "model.backbone": "resnet50",
      "model.dtype": "bfloat16",
      "model.fpn_norm": "sync_batch",
      "model.loss.mask_target": "crop",
      "model.norm": "sync_batch"
    },
    "versions": "JAX 0.10.2 (jaxlib 0.10.2), libtpu 0.0.42.1"
  }
]
"""
)
