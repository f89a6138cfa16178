"""A workdir with a checkpoint of the shapes model, made without training.

    config = predict_workdir.make(tmp_path / "run")

The shapes config (configs/shapes.py) at its full model size with freshly
initialised weights, saved as step 7 with its config.json, as train.py
leaves them. The detection score threshold is 0 so that even untrained
weights fill every detection slot (boxes, scores, classes and masks to
compare). data.root names a folder that does not exist, so the categories
are the shapes generator's own.
"""

import pathlib

import jax.numpy as jnp
import ml_collections

from configs import shapes
from detector import config as config_lib
from detector.engine import checkpoint, optimizer, train_state

STEP = 7


def config(root: pathlib.Path) -> ml_collections.ConfigDict:
    """The shapes config as saved in the workdir."""
    cfg = shapes.get_config()
    cfg.data.root = str(root / "no_data")
    cfg.model.detection.score_threshold = 0.0
    config_lib.set_nms_backend(cfg, "auto")
    return cfg


def make(workdir: pathlib.Path) -> ml_collections.ConfigDict:
    """Writes config.json and checkpoint STEP into `workdir`."""
    cfg = config(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    _, params, rest = train_state.create_model(cfg, cfg.seed)
    tx, _ = optimizer.make_optimizer(cfg)
    state = train_state.init_state(params, rest, tx)
    state = state.replace(step=jnp.asarray(STEP, jnp.int32))
    ckpt = checkpoint.Checkpointer(workdir / "checkpoints", max_to_keep=1)
    ckpt.save(STEP, train_state.to_tree(state))
    ckpt.wait()
    ckpt.close()
    # As train_lib.save_config writes it (that module needs clu and TF).
    (workdir / "config.json").write_text(
        cfg.to_json_best_effort(indent=2, sort_keys=True) + "\n"
    )
    return cfg
