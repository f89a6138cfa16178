"""Reading a PyTorch-named state dict from a weights file, checked: the one
home for what every torchvision-named file goes through before its tensors
are mapped (backbone_weights.py, torchvision_maskrcnn.py)."""

import pathlib

import ml_dtypes
import numpy as np
from absl import logging

_WRAPPER_PREFIX = "module."  # torch.nn.DataParallel / DistributedDataParallel
_VARIANCE_SUFFIX = ".running_var"


def where(field: str, path: str | pathlib.Path) -> str:
    """The start of every error line about the file: config.<field>='path'."""
    return f"config.{field}={str(path)!r}"


def _read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(path)


def _read_npz(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _read_pth(path: pathlib.Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise _TorchMissing() from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = state.get("state_dict", state.get("model", state))
    return {name: _tensor_array(value, torch) for name, value in state.items()}


def _tensor_array(tensor, torch) -> np.ndarray:
    """A torch tensor as numpy; bfloat16 (which .numpy() refuses) through
    its bits."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def is_float(dtype: np.dtype) -> bool:
    """Whether `dtype` is a floating type: numpy's, or ml_dtypes' bfloat16
    and float8 types (which np.floating does not include)."""
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


class _TorchMissing(Exception):
    """A .pth file without torch installed."""


# config field -> what to do when the file it names is missing.
MISSING_HINTS = {
    "model.backbone_init": "; docs/coco.md says where to get it, or start "
    "from random weights with --config.model.backbone_init=''",
}
READERS = {
    ".safetensors": _read_safetensors,
    ".npz": _read_npz,
    ".pth": _read_pth,
    ".pt": _read_pth,
}


def _read_raw(path: pathlib.Path, field: str) -> dict[str, np.ndarray]:
    here = where(field, path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{here}: no such file{MISSING_HINTS.get(field, '')}"
        )
    reader = READERS.get(path.suffix)
    if reader is None:
        raise ValueError(
            f"{here}: unknown file type {path.suffix!r}; "
            f"known: {', '.join(READERS)}"
        )
    try:
        return reader(path)
    except _TorchMissing:
        raise ValueError(
            f"{here}: reading .pth needs torch, which is not installed; "
            "install the 'torch' extra (pip install -e '.[torch]') or "
            "convert the file to .safetensors (docs/coco.md)"
        ) from None
    except Exception as e:  # each reader's own errors, as one line
        raise ValueError(
            f"{here}: not a readable {path.suffix} file "
            f"({' '.join(str(e).split()) or type(e).__name__})"
        ) from None


def strip_wrapper_prefix(
    state: dict[str, np.ndarray], path: str | pathlib.Path
) -> dict[str, np.ndarray]:
    """`state` without a `module.` prefix that every name carries."""
    if not state or not all(n.startswith(_WRAPPER_PREFIX) for n in state):
        return state
    logging.info(
        "%s: stripped the DataParallel prefix %r from all %d names",
        path,
        _WRAPPER_PREFIX,
        len(state),
    )
    return {name[len(_WRAPPER_PREFIX) :]: v for name, v in state.items()}


def check_values(
    state: dict[str, np.ndarray], path: str | pathlib.Path, field: str
) -> None:
    """Raises on the first non-finite tensor or negative running variance."""
    for name, value in state.items():
        value = np.asarray(value)
        if not is_float(value.dtype):
            continue
        if not np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32)  # bfloat16: exact in float32
        finite = np.isfinite(value)
        if not finite.all():
            bad = value[~finite]
            raise ValueError(
                f"{where(field, path)}: {name} holds {bad.size} non-finite "
                f"values (first: {bad.flat[0]}); the file is damaged or "
                "was saved from a diverged run"
            )
        if name.endswith(_VARIANCE_SUFFIX) and (value < 0).any():
            raise ValueError(
                f"{where(field, path)}: {name} holds negative running "
                f"variances (min {float(value.min()):g}); BatchNorm "
                "statistics cannot be negative"
            )


def read(path: str | pathlib.Path, field: str) -> dict[str, np.ndarray]:
    """The checked named arrays of a weights file.

    The reader goes by suffix: `.safetensors` (numpy, no torch) and `.npz`
    always, `.pth` / `.pt` where torch is installed (bfloat16 kept as
    bfloat16). A DataParallel `module.` prefix is stripped with a log line;
    every floating tensor must be finite and no BatchNorm `running_var`
    negative, so a bad file is refused before training starts.

    Args:
      path: the file; its suffix picks the reader.
      field: the config field that names it ('model.backbone_init'), for
        the error lines.

    Raises:
      FileNotFoundError / ValueError: one line naming the field, the file
        and the problem.
    """
    state = _read_raw(pathlib.Path(path), field)
    state = strip_wrapper_prefix(state, path)
    check_values(state, path, field)
    return state
