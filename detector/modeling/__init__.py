"""Mask R-CNN itself: backbone, FPN, RPN, ROI heads, losses.

Everything here is the network and its static-shape parts; nothing imports
the training engine or evaluation (tests/test_import_graph.py).
"""
