"""Input data: sources (COCO folder, TFDS, synthetic shapes), tf.data pipelines.

Import the submodule you need (`detector.data.pipeline`, ...); this package
imports nothing, so `python -m detector.data.shapes_writer` stays
TensorFlow-free.
"""
