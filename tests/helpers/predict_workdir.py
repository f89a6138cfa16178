"""A workdir with a checkpoint of the shapes model, made without training.

    config = predict_workdir.make(tmp_path / "run")
    config = predict_workdir.make_grouped(tmp_path / "run", tmp_path / "data")

The shapes config (configs/shapes.py) at its full model size with freshly
initialised weights, saved as step STEP with its config.json, as train.py
leaves them (benchmarks/predict_bench.py). The detection score threshold is
0 so that even untrained weights fill every detection slot (boxes, scores,
classes and masks to compare). data.root names a folder that does not
exist, so the categories are the shapes generator's own. `make_grouped`
places images on a landscape and a portrait canvas instead
(tests/helpers/mixed_orientations.py, over a folder it writes: pycocotools).
"""

import pathlib

import ml_collections

from benchmarks import predict_bench

STEP = predict_bench.CHECKPOINT_STEP
# Images of each split of make_grouped's folder: every third portrait, so
# that "val" fills batches of 2 of each orientation.
GROUPED_IMAGES = 6
config = predict_bench.shapes_config


def make(workdir: pathlib.Path) -> ml_collections.ConfigDict:
    """Writes config.json and checkpoint STEP into `workdir`."""
    cfg = config(workdir)
    predict_bench.write_untrained_workdir(workdir, cfg)
    return cfg


def make_grouped(
    workdir: pathlib.Path, root: pathlib.Path
) -> ml_collections.ConfigDict:
    """Writes `root`, a COCO folder of landscape and portrait images
    ("train", whose categories the model names, and "val", IMAGES each),
    then config.json and checkpoint STEP of the grouped config over it
    (canvases 64 x 128 and 128 x 64) into `workdir`."""
    from detector.launch import validate
    from tests.helpers import mixed_orientations

    for split in ("train", "val"):
        mixed_orientations.write(root, split, GROUPED_IMAGES)
    cfg = mixed_orientations.grouped_config(root)
    cfg.model.detection.score_threshold = 0.0
    # Statistics of no norm span the canvas (a GroupNorm's would take in
    # the padding): the model sees each image as if alone, on any canvas.
    cfg.model.norm = "frozen_batch"
    validate.validate(cfg)
    predict_bench.write_untrained_workdir(workdir, cfg)
    return cfg
