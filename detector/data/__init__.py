"""Input data: sources and tf.data pipelines. The package imports nothing:
import the submodule you need (the shapes writer stays TensorFlow-free)."""
