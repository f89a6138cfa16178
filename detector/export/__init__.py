"""Taking a trained model out of the trainer: the predict function on image
files (`serving`), its `jax.export` serialization (`exporter`) and the
categories it names (`categories`). Runs with the model imported; the light
side that runs an artifact without it is `detector.predict`."""
