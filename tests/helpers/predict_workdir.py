"""A workdir with a checkpoint of the shapes model, made without training.

    config = predict_workdir.make(tmp_path / "run")

The shapes config (configs/shapes.py) at its full model size with freshly
initialised weights, saved as step STEP with its config.json, as train.py
leaves them (benchmarks/predict_bench.py). The detection score threshold is
0 so that even untrained weights fill every detection slot (boxes, scores,
classes and masks to compare). data.root names a folder that does not
exist, so the categories are the shapes generator's own.
"""

import pathlib

import ml_collections

from benchmarks import predict_bench

STEP = predict_bench.CHECKPOINT_STEP
config = predict_bench.shapes_config


def make(workdir: pathlib.Path) -> ml_collections.ConfigDict:
    """Writes config.json and checkpoint STEP into `workdir`."""
    cfg = config(workdir)
    predict_bench.write_untrained_workdir(workdir, cfg)
    return cfg
