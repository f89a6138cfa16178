"""What runs the model: the training loop, step and state, the optimizer,
checkpoints, weight loading and warm starts, multi-host start-up, sharding,
determinism and training metrics."""
