"""Model state and weights: the train state's restore-or-init and the
read-only restore (`train_state`), the optimizer, orbax checkpoints, warm
starts from other runs, and weights read from files (ResNet and torchvision
Mask R-CNN state dicts)."""
