"""Model state: restore-or-init, optimizer, orbax checkpoints, warm starts."""
