"""COCO evaluation of a checkpoint and drawing of its detections."""
