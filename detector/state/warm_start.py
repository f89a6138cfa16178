"""Where a fresh run's weights come from: a pretrained backbone file or
another run's checkpoint, applied to the freshly initialised model
(docs/fine-tuning.md, docs/torchvision-weights.md)."""

import pathlib

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from detector.modeling import model as model_lib
from detector.state import checkpoint, legacy_paths
from detector.state.optimizer import path_name
from detector.weights import backbone_weights, torchvision_maskrcnn

_ITEM = "default"  # the item name orbax's CheckpointManager writes
_NUM_CLASSES_FROM = (
    "roi_heads/box_head/classes/bias"  # shape (num_classes + 1,)
)


def flat(tree) -> dict[str, object]:
    """'backbone/stem/conv/kernel' -> leaf, for an nnx.State or dicts."""
    return {
        path_name(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _replace(state: nnx.State, arrays: dict[str, np.ndarray]) -> nnx.State:
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            np.asarray(arrays[path_name(path)], leaf.dtype)
            if path_name(path) in arrays
            else leaf
        ),
        state,
    )


def apply(
    config: ml_collections.ConfigDict, params: nnx.State, rest: nnx.State
) -> tuple[nnx.State, nnx.State]:
    """(params, rest) with config.model's warm start applied, if any.

    `init_checkpoint` names a torchvision state-dict FILE or another run's
    orbax checkpoint FOLDER (its workdir, checkpoints/ or one step folder);
    only params and rest are read, so the step and the optimizer state start
    fresh. Called only for a workdir with no checkpoint of its own.
    """
    model = config.model
    shapes = {
        name: tuple(leaf.shape)
        for name, leaf in {**flat(params), **flat(rest)}.items()
    }
    init_file = pathlib.Path(model.init_checkpoint).expanduser()
    if model.backbone_init:
        arrays = backbone_weights.load(model.backbone_init, model, shapes)
    elif model.init_checkpoint and init_file.is_file():
        arrays = torchvision_maskrcnn.load(init_file, config, shapes)
    elif model.init_checkpoint:
        arrays = from_checkpoint(
            model.init_checkpoint, shapes, num_classes=config.data.num_classes
        )
    else:
        return params, rest
    return _replace(params, arrays), _replace(rest, arrays)


def _step_location(location: str) -> tuple[pathlib.Path, int | None]:
    """(checkpoints folder, step or None for the latest) of a location."""
    where = f"config.model.init_checkpoint={location!r}"
    path = pathlib.Path(location).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{where}: no such file or folder")
    if not path.is_dir():
        raise ValueError(
            f"{where}: not a folder (give a workdir written by "
            "train.py, its checkpoints/ folder or one step "
            "folder)"
        )
    if (path / "checkpoints").is_dir():  # a workdir
        return path / "checkpoints", None
    if (path / _ITEM).is_dir() and path.name.isdigit():  # one step
        return path.parent, int(path.name)
    return path, None


def _read(location: str) -> tuple[dict[str, np.ndarray], str]:
    """(params and rest arrays by path, 'folder/step') of a checkpoint."""
    where = f"config.model.init_checkpoint={location!r}"
    directory, step = _step_location(location)
    manager = ocp.CheckpointManager(
        directory.absolute(),
        options=ocp.CheckpointManagerOptions(create=False),
        item_handlers=ocp.PyTreeCheckpointHandler(),
    )
    try:
        step = manager.latest_step() if step is None else step
        if step is None or step not in manager.all_steps():
            raise ValueError(
                f"{where}: holds no checkpoint (give a workdir "
                "written by train.py, its checkpoints/ folder "
                "or one step folder)"
            )
        stored = manager.item_metadata(step).tree
        missing = [key for key in ("params", "rest") if key not in stored]
        if missing:
            raise ValueError(
                f"{where}: step {step} has no {missing[0]!r}: "
                "not a checkpoint written by train.py"
            )
        wanted = {key: stored[key] for key in ("params", "rest")}
        as_numpy = jax.tree.map(
            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted
        )
        with jax.transfer_guard("allow"):
            restored = manager.restore(
                step,
                args=ocp.args.PyTreeRestore(
                    item=wanted, restore_args=as_numpy, partial_restore=True
                ),
            )
        try:  # the same checks as a resume
            checkpoint.verify_arrays(
                restored,
                checkpoint.saved_checksums(manager, step),
                f"{directory}/{step}",
            )
        except checkpoint.DamagedCheckpointError as e:
            raise ValueError(f"{where}: step {step} is damaged: {e}") from None
    finally:
        manager.close()
    arrays = {**flat(restored["params"]), **flat(restored["rest"])}
    return (
        {legacy_paths.current_name(k): v for k, v in arrays.items()},
        f"{directory}/{step}",
    )


def _is_class_dependent(name: str) -> bool:
    return any(
        name.startswith(prefix + "/") for prefix in model_lib.CLASS_DEPENDENT
    )


def from_checkpoint(
    location: str, shapes: dict[str, tuple[int, ...]], *, num_classes: int
) -> dict[str, np.ndarray]:
    """The arrays of checkpoint `location` this model takes, by path.

    Args:
      location: model.init_checkpoint.
      shapes: this model's variable shapes by path.
      num_classes: this config's data.num_classes.

    Raises:
      FileNotFoundError / ValueError: one line, for a missing location, a
        folder without a checkpoint, or a checkpoint none of whose arrays
        match this model.
    """
    source, described = _read(location)
    source_classes = (
        source[_NUM_CLASSES_FROM].shape[0] - 1
        if _NUM_CLASSES_FROM in source
        else None
    )
    new_classes = source_classes is not None and source_classes != num_classes
    arrays, reinitialised = {}, []
    for name, shape in shapes.items():
        if new_classes and _is_class_dependent(name):
            reinitialised.append(
                f"{name} (num_classes {source_classes} -> {num_classes})"
            )
        elif name not in source:
            reinitialised.append(f"{name} (not in the checkpoint)")
        elif tuple(source[name].shape) != shape:
            reinitialised.append(
                f"{name} (shape {tuple(source[name].shape)}"
                f" in the checkpoint, {shape} here)"
            )
        else:
            arrays[name] = source[name]
    if not arrays:
        raise ValueError(
            f"config.model.init_checkpoint={location!r}: none "
            f"of the arrays of {described} match this model "
            "(path and shape): written by a different model"
        )
    unused = sorted(set(source) - set(shapes))
    logging.info(
        "init_checkpoint: %d arrays restored from %s (the step and "
        "optimizer state start fresh): %s",
        len(arrays),
        described,
        ", ".join(arrays),
    )
    logging.info(
        "init_checkpoint: %d arrays reinitialised: %s",
        len(reinitialised),
        ", ".join(reinitialised) or "none",
    )
    if unused:
        logging.info(
            "init_checkpoint: %d checkpoint arrays unused: %s",
            len(unused),
            ", ".join(unused),
        )
    return arrays
