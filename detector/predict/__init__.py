"""Runs an exported artifact (or the model in process) on image files:
predictions.json and overlays. Imports numpy, PIL, jax and detector/imaging/
only, never the model, config, training code, TensorFlow, Flax or orbax."""
