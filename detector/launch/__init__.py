"""How a run starts, shared by train.py, eval.py, export.py and predict.py:
flags and one-line errors, a run's config and its history, validation;
what reaches the console: console/."""
