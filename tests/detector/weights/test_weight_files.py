"""weight_files: every float dtype is checked, bfloat16 .pth files read."""

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from detector.weights import weight_files
from tests.helpers import torch_process

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_of_every_float_dtype_are_refused(
    tmp_path, dtype, bad
):
    path = tmp_path / "w.safetensors"
    weight = np.ones((2, 3), dtype)
    weight[1, 2] = bad
    save_file({"conv1.weight": weight}, path)
    with pytest.raises(ValueError) as error:
        weight_files.read(path, "model.backbone_init")
    assert str(error.value).startswith(
        f"config.model.backbone_init='{path}': conv1.weight holds 1 "
        "non-finite values"
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_negative_variance_of_every_float_dtype_is_refused(tmp_path, dtype):
    path = tmp_path / "w.safetensors"
    save_file({"bn1.running_var": np.asarray([1.0, -0.5], dtype)}, path)
    with pytest.raises(ValueError, match=r"bn1\.running_var holds negative"):
        weight_files.read(path, "model.backbone_init")


def test_integer_tensors_are_not_float():
    assert not weight_files.is_float(np.dtype(np.int64))
    assert weight_files.is_float(np.dtype(ml_dtypes.bfloat16))


@torch_process.imports_torch
def test_bfloat16_pth_reads_as_bfloat16(tmp_path):
    import torch

    path = tmp_path / "w.pth"
    torch.save(
        {"conv1.weight": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)},
        path,
    )
    state = weight_files.read(path, "model.backbone_init")
    assert state["conv1.weight"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(
        state["conv1.weight"].astype(np.float32), [1.5, -2.0]
    )


def test_a_missing_backbone_file_says_how_to_start_without_it(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        weight_files.read(tmp_path / "r50.safetensors", "model.backbone_init")
    assert str(info.value) == (
        f"config.model.backbone_init='{tmp_path}/r50.safetensors': no such "
        "file; docs/coco.md says where to get it, or start from random "
        "weights with --config.model.backbone_init=''"
    )
