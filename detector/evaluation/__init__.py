"""COCO evaluation of a checkpoint and drawing of its detections; COCOeval
backends by name (`coco_backends`)."""
