"""A torchvision Mask R-CNN state dict (`maskrcnn_resnet50_fpn` v1 or v2)
mapped onto this project's model (docs/torchvision-weights.md).

Shapes: F fpn channels, Q box pool size (7), A anchors per location,
K + 1 torchvision classes (91), C our classes (data.num_classes).
"""

import pathlib
from collections.abc import Callable

import ml_collections
import numpy as np
from absl import logging

from detector.config import model as model_config
from detector.weights import backbone_weights, weight_files

FIELD = "model.init_checkpoint"
# COCO 2017's 80 category ids in id order; torchvision's class index is the id.
COCO_CATEGORY_IDS = (
    *range(1, 12),
    *range(13, 26),
    27,
    28,
    *range(31, 45),
    *range(46, 66),
    67,
    70,
    *range(72, 83),
    *range(84, 91),
)
TORCHVISION_CLASSES = 91  # background + COCO ids 1..90
_IGNORED_SUFFIX = ".num_batches_tracked"

# Other torchvision detection models, by a name only they hold.
_OTHER_MODELS = (
    ("roi_heads.keypoint_", "a Keypoint R-CNN (keypointrcnn_*) file"),
)

# The Mask R-CNN versions: a name only that version holds (None: the
# default), and the config.model settings its layout needs (key -> the
# values that build it).
VERSIONS = {
    "maskrcnn_resnet50_fpn_v2": (
        "roi_heads.box_head.0.0.weight",
        {
            "norm": ("batch", "sync_batch"),
            "fpn_norm": ("batch", "sync_batch"),
            "rpn.head_convs": (2,),
            "rpn.head_norm": ("none",),
            "roi.box_head": ("4conv1fc",),
            "roi.box_head_norm": ("batch", "sync_batch"),
            "roi.mask_head_norm": ("batch", "sync_batch"),
        },
    ),
    "maskrcnn_resnet50_fpn (v1)": (
        None,
        {
            "norm": ("frozen_batch",),
            "fpn_norm": ("auto", "none"),
            "rpn.head_convs": (1,),
            "rpn.head_norm": ("none",),
            "roi.box_head": ("2fc",),
            "roi.mask_head_norm": ("auto", "none"),
        },
    ),
}


def _oihw_to_hwio(w: np.ndarray) -> np.ndarray:
    return w.transpose(backbone_weights.OIHW_TO_HWIO)


def _hwio_to_oihw(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[i] for i in np.argsort(backbone_weights.OIHW_TO_HWIO))


def _conv1x1_to_linear(w: np.ndarray) -> np.ndarray:
    return w[:, :, 0, 0].T


def _deconv(w: np.ndarray) -> np.ndarray:
    return w.transpose(2, 3, 0, 1)


class Layout:
    """How one kind of tensor changes layout: shape there <- shape here."""

    def __init__(
        self,
        theirs: Callable[[tuple[int, ...]], tuple[int, ...]],
        convert: Callable[[np.ndarray], np.ndarray] | None,
    ):
        self.theirs, self.convert = theirs, convert


LAYOUTS = {
    "conv": Layout(_hwio_to_oihw, _oihw_to_hwio),
    "conv1x1": Layout(lambda s: (s[1], s[0], 1, 1), _conv1x1_to_linear),
    "linear": Layout(lambda s: (s[1], s[0]), lambda w: w.T),
    "deconv": Layout(lambda s: (s[2], s[3], s[0], s[1]), _deconv),
    "vector": Layout(lambda s: s, None),
}


def _fc6_layout(channels: int, pool: int) -> Layout:
    """fc6: input rows (F, Q, Q) channel-first -> ours (Q, Q, F)."""

    def convert(w: np.ndarray) -> np.ndarray:
        out = w.shape[0]
        w = w.reshape(out, channels, pool, pool).transpose(2, 3, 1, 0)
        return w.reshape(pool * pool * channels, out)

    return Layout(lambda s: (s[1], s[0]), convert)


def _aliases(name: str) -> tuple[str, ...]:
    """Older torchvision names of a tensor (before Conv2dNormActivation)."""
    if name.startswith("rpn.head.conv.0.0."):
        return (name.replace("conv.0.0.", "conv."),)
    if name.startswith("roi_heads.mask_head.") and ".0." in name:
        index = int(name.split(".")[2])
        field = name.rsplit(".", 1)[1]
        return (f"roi_heads.mask_head.mask_fcn{index + 1}.{field}",)
    return ()


# Our norm -> its torchvision tensors (field -> our variable).
_NORM_FIELDS = {
    "batch": {
        "weight": "scale",
        "bias": "bias",
        "running_mean": "mean",
        "running_var": "var",
    },
    "group": {"weight": "scale", "bias": "bias"},
}
_NORM_FIELDS["sync_batch"] = _NORM_FIELDS["batch"]


def _add_layer(table, theirs, ours, kind, norm: str = "none") -> None:
    """A torchvision Conv2dNormActivation (or bare layer) `theirs`."""
    layout = LAYOUTS[kind] if isinstance(kind, str) else kind
    if norm == "none":
        table[f"{theirs}.weight"] = (f"{ours}/kernel", layout)
        table[f"{theirs}.bias"] = (f"{ours}/bias", LAYOUTS["vector"])
        return
    # Conv2dNormActivation: .0 the conv (no bias), .1 the norm.
    table[f"{theirs[:-2]}.0.weight"] = (f"{ours}/conv/kernel", layout)
    for field, variable in _NORM_FIELDS[norm].items():
        table[f"{theirs[:-2]}.1.{field}"] = (
            f"{ours}/norm/{variable}",
            LAYOUTS["vector"],
        )


def tensor_table(
    model: ml_collections.ConfigDict,
) -> dict[str, tuple[str, Layout]]:
    """torchvision name -> (our variable path, layout), class heads aside,
    for the FPN and head layout that config.model builds (v1 or v2)."""
    table = {
        f"backbone.body.{name}": (
            ours,
            LAYOUTS["vector" if convert is None else "conv"],
        )
        for name, (ours, convert) in backbone_weights.tensor_table(
            model, 4
        ).items()
    }

    def add(theirs: str, ours: str, kind, norm: str = "none") -> None:
        _add_layer(table, theirs, ours, kind, norm)

    lateral_norm, output_norm = model_config.fpn_norms(model)
    for i in range(min(5, model.max_level) - model.min_level + 1):
        add(
            f"backbone.fpn.inner_blocks.{i}.0",
            f"fpn/lateral/{i}",
            "conv1x1",
            lateral_norm,
        )
        add(
            f"backbone.fpn.layer_blocks.{i}.0",
            f"fpn/output/{i}",
            "conv",
            output_norm,
        )
    rpn_norm = model.rpn.head_norm
    add("rpn.head.conv.0.0", "rpn/head/conv", "conv", rpn_norm)
    for j in range(1, model.rpn.head_convs):
        add(
            f"rpn.head.conv.{j}.0",
            f"rpn/head/more_convs/{j - 1}",
            "conv",
            rpn_norm,
        )
    add("rpn.head.cls_logits", "rpn/head/objectness", "conv1x1")
    add("rpn.head.bbox_pred", "rpn/head/deltas", "conv1x1")
    _BOX_HEAD_TABLES[model.roi.box_head](add, model)
    for i in range(model.roi.mask_head_convs):
        add(
            f"roi_heads.mask_head.{i}.0",
            f"roi_heads/mask_head/convs/{i}",
            "conv",
            model_config.mask_head_norm(model),
        )
    add(
        "roi_heads.mask_predictor.conv5_mask",
        "roi_heads/mask_head/upsample",
        "deconv",
    )
    return table


def _two_mlp_head(add, model: ml_collections.ConfigDict) -> None:
    """TwoMLPHead (v1): fc6, fc7."""
    add(
        "roi_heads.box_head.fc6",
        "roi_heads/box_head/fc1",
        _fc6_layout(model.fpn_channels, model.roi.pool_size),
    )
    add("roi_heads.box_head.fc7", "roi_heads/box_head/fc2", "linear")


def _conv_fc_head(add, model: ml_collections.ConfigDict) -> None:
    """FastRCNNConvFCHead (v2), an nn.Sequential: convs 0..3, then 4 the
    Flatten, 5 the Linear (its input rows channel-first, like fc6)."""
    convs = 4
    for i in range(convs):
        add(
            f"roi_heads.box_head.{i}.0",
            f"roi_heads/box_head/convs/{i}",
            "conv",
            model.roi.box_head_norm,
        )
    add(
        f"roi_heads.box_head.{convs + 1}",
        "roi_heads/box_head/fc",
        _fc6_layout(model.roi.box_head_conv_dim, model.roi.pool_size),
    )


# model.roi.box_head -> adds its tensors (every entry of box_head.BOX_HEADS
# that torchvision has).
_BOX_HEAD_TABLES = {"2fc": _two_mlp_head, "4conv1fc": _conv_fc_head}


# Class-dependent tensors: torchvision name -> (our path, layout, rows per
# class, whether row 0 (background) is kept).
_CLASS_TENSORS = {
    "roi_heads.box_predictor.cls_score.weight": (
        "roi_heads/box_head/classes/kernel",
        "linear",
        1,
        True,
    ),
    "roi_heads.box_predictor.cls_score.bias": (
        "roi_heads/box_head/classes/bias",
        "vector",
        1,
        True,
    ),
    "roi_heads.box_predictor.bbox_pred.weight": (
        "roi_heads/box_head/deltas/kernel",
        "linear",
        4,
        False,
    ),
    "roi_heads.box_predictor.bbox_pred.bias": (
        "roi_heads/box_head/deltas/bias",
        "vector",
        4,
        False,
    ),
    "roi_heads.mask_predictor.mask_fcn_logits.weight": (
        "roi_heads/mask_head/logits/kernel",
        "conv1x1",
        1,
        False,
    ),
    "roi_heads.mask_predictor.mask_fcn_logits.bias": (
        "roi_heads/mask_head/logits/bias",
        "vector",
        1,
        False,
    ),
}


def class_rows(num_classes: int) -> tuple[int, ...] | None:
    """torchvision class index of our classes 1..C; None: no mapping."""
    if num_classes == TORCHVISION_CLASSES - 1:
        return tuple(range(1, TORCHVISION_CLASSES))
    if num_classes == len(COCO_CATEGORY_IDS):
        return COCO_CATEGORY_IDS
    return None


def _select_classes(
    array: np.ndarray, rows: tuple[int, ...], per_class: int, background: bool
) -> np.ndarray:
    """The output rows (first axis, torch layout) of our classes."""
    classes = ((0,) if background else ()) + rows
    index = np.asarray(
        [c * per_class + k for c in classes for k in range(per_class)]
    )
    return array[index]


def _identify(where: str, state: dict[str, np.ndarray]) -> None:
    """Raises one line for another torchvision detection model's file."""
    for marker, what in _OTHER_MODELS:
        name = next((n for n in state if n.startswith(marker)), None)
        if name is not None:
            raise ValueError(
                f"{where}: {what} ({name} has shape "
                f"{tuple(state[name].shape)}, which a Mask R-CNN file does "
                "not hold)"
            )
    if not any(n.startswith("roi_heads.mask_") for n in state) and any(
        n.startswith("roi_heads.box_") for n in state
    ):
        raise ValueError(
            f"{where}: a Faster R-CNN (fasterrcnn_*) file: it has no "
            "roi_heads.mask_head / mask_predictor tensors (first missing: "
            "roi_heads.mask_head.0.0.weight)"
        )
    if not any(n.startswith(("backbone.body.", "rpn.head.")) for n in state):
        first = next(iter(state), "nothing")
        raise ValueError(
            f"{where}: not a torchvision Mask R-CNN state dict (no "
            f"backbone.body.* or rpn.head.* names; first name: {first})"
        )


def _lookup(state: dict[str, np.ndarray], name: str) -> str | None:
    for candidate in (name, *_aliases(name)):
        if candidate in state:
            return candidate
    return None


def _version(state: dict[str, np.ndarray]) -> str:
    """The Mask R-CNN version of a state dict (a key of VERSIONS)."""
    for version, (marker, _) in VERSIONS.items():
        if marker is None or marker in state:
            return version
    raise AssertionError("VERSIONS ends in the default version")


def _check_config(
    where: str, model: ml_collections.ConfigDict, version: str
) -> None:
    """Raises one line naming the first setting `version` needs."""
    for key, values in VERSIONS[version][1].items():
        value = model
        for part in key.split("."):
            value = value[part]
        if value not in values:
            wanted = " or ".join(repr(v) for v in values)
            raise ValueError(
                f"{where}: a torchvision {version} file needs "
                f"model.{key}={wanted}, not {value!r} (configs/"
                "coco_r50_fpn.py:torchvision or :torchvision_v2 set them)"
            )


def load(
    path: str | pathlib.Path,
    config: ml_collections.ConfigDict,
    target_shapes: dict[str, tuple[int, ...]],
) -> dict[str, np.ndarray]:
    """Our variable path -> float32 array in our layout
    (docs/torchvision-weights.md).

    Args:
      path: the state-dict file (model.init_checkpoint).
      config: the run's config (model, data.num_classes).
      target_shapes: the shape of every model variable by path.

    Returns:
      Arrays for every variable the file maps; the class-dependent heads
      are left out (fresh) when data.num_classes has no mapping.

    Raises:
      FileNotFoundError / ValueError: one line naming the file and the
        problem: the first tensor that does not map and both shapes.
    """
    model = config.model
    where = weight_files.where(FIELD, path)
    state = weight_files.read(path, FIELD)
    _identify(where, state)
    _check_config(where, model, _version(state))
    arrays, used = {}, set()
    for name, (ours, layout) in tensor_table(model).items():
        found = _lookup(state, name)
        if found is None:
            raise ValueError(
                f"{where}: {name} is missing (our {ours} needs "
                f"{layout.theirs(target_shapes[ours])})"
            )
        _check_shape(where, found, state[found], ours, layout, target_shapes)
        array = np.asarray(state[found], np.float32)
        arrays[ours] = layout.convert(array) if layout.convert else array
        used.add(found)
    rows = class_rows(int(config.data.num_classes))
    for name, (ours, kind, per_class, background) in _CLASS_TENSORS.items():
        if name not in state:
            raise ValueError(f"{where}: {name} is missing")
        used.add(name)
        array = np.asarray(state[name], np.float32)
        if array.shape[0] != TORCHVISION_CLASSES * per_class:
            raise ValueError(
                f"{where}: {name} has shape {array.shape}, not "
                f"{TORCHVISION_CLASSES * per_class} outputs (torchvision's "
                f"{TORCHVISION_CLASSES} COCO classes)"
            )
        if rows is None:
            continue
        layout = LAYOUTS[kind]
        array = _select_classes(array, rows, per_class, background)
        _check_shape(where, name, array, ours, layout, target_shapes)
        arrays[ours] = layout.convert(array) if layout.convert else array
    unknown = [
        n for n in state if n not in used and not n.endswith(_IGNORED_SUFFIX)
    ]
    if unknown:
        raise ValueError(
            f"{where}: {len(unknown)} tensors this model has no place for "
            f"(first: {unknown[0]} of shape {tuple(state[unknown[0]].shape)})"
        )
    _log(path, arrays, rows, config)
    return arrays


def _check_shape(where, name, array, ours, layout, target_shapes) -> None:
    wanted = layout.theirs(target_shapes[ours])
    if tuple(array.shape) != tuple(wanted):
        raise ValueError(
            f"{where}: {name} has shape {tuple(array.shape)}, but our "
            f"{ours} {target_shapes[ours]} needs {tuple(wanted)}"
        )


def _log(path, arrays: dict, rows, config: ml_collections.ConfigDict) -> None:
    if rows is None:
        logging.info(
            "init_checkpoint: data.num_classes=%d has no mapping from "
            "torchvision's %d COCO classes: the class-dependent heads "
            "(roi_heads/box_head/classes, roi_heads/box_head/deltas, "
            "roi_heads/mask_head/logits) are "
            "reinitialised",
            config.data.num_classes,
            TORCHVISION_CLASSES,
        )
    logging.info(
        "init_checkpoint: %d arrays loaded from the torchvision Mask R-CNN "
        "file %s (the step and optimizer state start fresh)",
        len(arrays),
        path,
    )
