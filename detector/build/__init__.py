"""A validated config turned into the model: each part from its section."""
