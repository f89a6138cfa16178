"""Pretrained ResNet weights from a torchvision-named state dict (timm's
ResNets use the same names), mapped onto this project's backbone
(docs/coco.md, docs/torchvision-weights.md)."""

import pathlib
from collections.abc import Callable

import ml_collections
import numpy as np
from absl import logging

from detector.modeling import backbone
from detector.weights import weight_files

# Per-module tensor tables: torchvision tensor name -> (our variable name,
# layout conversion from torchvision's layout to ours).
OIHW_TO_HWIO = (2, 3, 1, 0)
_CONV = {"weight": ("kernel", lambda w: w.transpose(OIHW_TO_HWIO))}
_NORM = {
    "weight": ("scale", None),
    "bias": ("bias", None),
    "running_mean": ("mean", None),
    "running_var": ("var", None),
}
_TABLES = {"conv": _CONV, "norm": _NORM}
_IGNORED_PREFIXES = ("fc.",)  # the ImageNet classifier
_COUNTER_SUFFIX = ".num_batches_tracked"  # BatchNorm bookkeeping
_BN_STATISTICS = (".running_mean", ".running_var")
_FIELD = "model.backbone_init"
_LISTED = 8  # names listed in an error before "and N more"

Converter = Callable[[np.ndarray], np.ndarray] | None


def module_table(
    depths: tuple[int, ...], bottleneck: bool, num_stages: int
) -> dict[str, tuple[str, str]]:
    """torchvision module name -> (our module path, 'conv' | 'norm').

    Covers the stem and the first `num_stages` stages of a ResNet with
    `depths` blocks per stage; block 0 of a stage has a projection shortcut
    where our ResidualBlock has one (stride 2, or a channel change).
    """
    table = {}
    _add_conv_norm(table, "conv1", "bn1", "backbone/stem")
    convs = 3 if bottleneck else 2
    for s, depth in enumerate(depths[:num_stages]):
        for b in range(depth):
            ours, theirs = f"backbone/stages/{s}/{b}", f"layer{s + 1}.{b}"
            for j in range(convs):
                _add_conv_norm(
                    table,
                    f"{theirs}.conv{j + 1}",
                    f"{theirs}.bn{j + 1}",
                    f"{ours}/layers/{j}",
                )
            if b == 0 and (s > 0 or bottleneck):
                _add_conv_norm(
                    table,
                    f"{theirs}.downsample.0",
                    f"{theirs}.downsample.1",
                    f"{ours}/shortcut",
                )
    return table


def _add_conv_norm(
    table: dict[str, tuple[str, str]], conv: str, norm: str, ours: str
) -> None:
    """Maps torchvision's `conv` and its BatchNorm `norm` onto the conv and
    norm of our ConvNorm at `ours`."""
    table[conv] = (f"{ours}/conv", "conv")
    table[norm] = (f"{ours}/norm", "norm")


def tensor_table(
    model: ml_collections.ConfigDict, num_stages: int
) -> dict[str, tuple[str, Converter]]:
    """torchvision tensor name -> (our variable path, layout conversion)."""
    if model.backbone not in backbone.RESNETS:
        raise ValueError(
            f"config.model.backbone_init: no torchvision layout "
            f"for model.backbone={model.backbone!r}; known: "
            f"{', '.join(backbone.RESNETS)}"
        )
    depths, bottleneck = backbone.RESNETS[model.backbone]
    tensors = {}
    for theirs, (ours, kind) in module_table(
        depths, bottleneck, num_stages
    ).items():
        for field, (variable, convert) in _TABLES[kind].items():
            tensors[f"{theirs}.{field}"] = (f"{ours}/{variable}", convert)
    return tensors


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    more = len(names) - _LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _check_names(
    where: str,
    model: ml_collections.ConfigDict,
    state: dict[str, np.ndarray],
    tensors: dict[str, tuple[str, Converter]],
    unbuilt: set[str],
) -> None:
    """Raises on GN + BN statistics, unknown names and missing names."""
    if model.norm == "group" and any(
        name.endswith(_BN_STATISTICS) for name in state
    ):
        raise ValueError(
            f"{where}: holds BatchNorm statistics (running_mean,"
            " running_var), which model.norm='group' cannot "
            "take (GroupNorm has no running statistics); use "
            "model.norm='frozen_batch' or 'batch'"
        )
    unknown = [
        name
        for name in state
        if name not in tensors and name not in unbuilt and not _ignored(name)
    ]
    if unknown:
        raise ValueError(
            f"{where}: {len(unknown)} unknown names for "
            f"{model.backbone}: {_listed(unknown)}"
        )
    missing = [name for name in tensors if name not in state]
    if missing:
        raise ValueError(
            f"{where}: {len(missing)} names of {model.backbone} "
            f"missing: {_listed(missing)}"
        )


def _ignored(name: str) -> bool:
    return name.startswith(_IGNORED_PREFIXES) or name.endswith(_COUNTER_SUFFIX)


def load(
    path: str | pathlib.Path,
    model: ml_collections.ConfigDict,
    target_shapes: dict[str, tuple[int, ...]],
) -> dict[str, np.ndarray]:
    """Our variable path -> float32 array in our layout, for the backbone.

    Args:
      path: the weights file (model.backbone_init).
      model: config.model (backbone, norm).
      target_shapes: the shape of every model variable by path
        ('backbone/stem/conv/kernel'); which stages exist is read from it.

    Raises:
      FileNotFoundError / ValueError: one line naming the file and the
        problem (for a shape: the first mismatched name and both shapes).
    """
    where = weight_files.where(_FIELD, path)
    num_stages = len(
        {
            name.split("/")[2]
            for name in target_shapes
            if name.startswith("backbone/stages/")
        }
    )
    state = weight_files.read(path, _FIELD)
    tensors = tensor_table(model, num_stages)
    unbuilt = set(tensor_table(model, 4)) - set(tensors)
    # Shapes first: a file of another depth shows as a shape mismatch.
    for name, (ours, convert) in tensors.items():
        if name in state and ours in target_shapes:
            theirs = tuple(state[name].shape)
            wanted = target_shapes[ours]
            if convert is not None:  # our layout back to theirs
                wanted = tuple(wanted[i] for i in np.argsort(OIHW_TO_HWIO))
            if theirs != wanted:
                raise ValueError(
                    f"{where}: {name} has shape {theirs}, but "
                    f"{model.backbone} (backbone_width="
                    f"{model.backbone_width}) needs {wanted}"
                )
    _check_names(where, model, state, tensors, unbuilt)
    arrays = {}
    for name, (ours, convert) in tensors.items():
        array = np.asarray(state[name], np.float32)
        arrays[ours] = convert(array) if convert is not None else array
    _log(path, state, tensors, unbuilt)
    return arrays


def _log(path, state: dict, tensors: dict, unbuilt: set[str]) -> None:
    ignored = sorted(
        (name for name in state if name.startswith(_IGNORED_PREFIXES)),
        key=lambda n: (n.rsplit(".", 1)[0], n.endswith("bias")),
    )
    counters = sum(name.endswith(_COUNTER_SUFFIX) for name in state)
    if counters:
        ignored.append(f"{counters} BatchNorm num_batches_tracked counters")
    skipped = [name for name in state if name in unbuilt]
    if skipped:
        ignored.append(
            f"{len(skipped)} tensors of stages this pyramid does not build"
        )
    logging.info(
        "backbone_init: %d tensors loaded from %s, ignored: %s",
        len(tensors),
        path,
        ", ".join(ignored) or "nothing",
    )
