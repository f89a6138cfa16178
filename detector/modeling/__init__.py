"""Mask R-CNN itself: the network and its static-shape parts (docs/model.md);
nothing here imports the training engine or evaluation."""
