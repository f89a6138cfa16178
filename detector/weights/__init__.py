"""Weight files read, checked and mapped onto the model (torchvision names)."""
