"""A damaged, altered or misused artifact is one ArtifactError line."""

import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest

from detector.predict import artifact
from tests.helpers import groups

pytestmark = groups.EXPORTED


@pytest.fixture
def copy(exported_dir, tmp_path):
    """A scratch copy of the shared artifact folder."""
    target = tmp_path / "export"
    shutil.copytree(exported_dir, target)
    return target


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def _rewrite_meta(folder, **changes) -> None:
    path = folder / artifact.META_FILE
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def test_truncated_artifact(copy):
    path = copy / artifact.ARTIFACT_FILE
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error) == (
        f"{path}: its 1000 bytes differ from what export.py wrote "
        "(predict.json sha256): truncated or corrupt; export it again"
    )


def test_corrupt_artifact_whose_sha256_was_updated(copy):
    """Bytes that are no flatbuffer at all still fail in one line."""
    path = copy / artifact.ARTIFACT_FILE
    garbage = np.random.default_rng(0).bytes(4096)
    path.write_bytes(garbage)
    _rewrite_meta(
        copy, sha256=artifact.sha256(garbage), canvas_bytes=[len(garbage)]
    )
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error).startswith(
        f"{path}: not a jax.export artifact this JAX can read ("
    )


def test_missing_meta(copy):
    (copy / artifact.META_FILE).unlink()
    with pytest.raises(artifact.ArtifactError, match="predict.json: missing"):
        artifact.load(copy)


def _as_format_1(folder) -> None:
    """predict.json as export.py wrote it before format_version (the
    one-canvas predict.jax is the same bytes)."""
    path = folder / artifact.META_FILE
    meta = json.loads(path.read_text())
    canvas = meta.pop("canvases")[0]
    del meta["format_version"], meta["canvas_bytes"]
    meta = {
        "image_size": canvas,
        **meta,
        "resize": {"image_size": canvas, **meta["resize"]},
        "canvases": [canvas],
    }
    path.write_text(json.dumps(meta))


def test_a_format_1_artifact_loads_and_runs_as_today(copy, exported_dir):
    _as_format_1(copy)
    old, new = artifact.load(copy), artifact.load(exported_dir)
    assert old.canvases == new.canvases == ((128, 128),)
    assert old.resize == new.resize
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (2, 128, 128, 3)).astype(np.float32)
    sizes = np.asarray([[128, 100], [90, 128]], np.int32)
    with jax.default_device(jax.devices("cpu")[0]):
        outputs = artifact.run(old, images, sizes, sizes)
        expected = artifact.run(new, images, sizes, sizes)
    for key in artifact.OUTPUTS:
        np.testing.assert_array_equal(outputs[key], expected[key], key)


# The fixture's canvas is 128 x 128; BYTES stands for predict.jax's size.
@pytest.mark.parametrize(
    "format_1,changes,message",
    [
        (
            False,
            {"canvases": [[64, 64]]},
            "canvases=[[64, 64]] differs from the input sizes [[128, 128]] "
            "of predict.jax; restore the exported value or export again",
        ),
        (
            True,
            {"image_size": [64, 64]},
            "image_size=[64, 64] differs from the input size [128, 128] of "
            "predict.jax; restore the exported value or export again",
        ),
        (
            False,
            {"canvas_bytes": [1000]},
            "canvas_bytes=[1000] add up to 1000 bytes, not the BYTES of "
            "predict.jax; restore the exported values or export again",
        ),
    ],
)
def test_edited_canvases_name_the_key_and_what_predict_jax_holds(
    copy, format_1, changes, message
):
    if format_1:
        _as_format_1(copy)
    _rewrite_meta(copy, **changes)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    size = (copy / artifact.ARTIFACT_FILE).stat().st_size
    assert _one_line(error) == (
        f"{copy / artifact.META_FILE}: {message.replace('BYTES', str(size))}"
    )


def test_edited_categories_name_the_key(copy):
    _rewrite_meta(copy, categories=None)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error).startswith(
        f"{copy / artifact.META_FILE}: categories=None: must be a non-empty"
    )


def test_other_calling_convention_in_meta(copy):
    _rewrite_meta(copy, calling_convention_version=99, jax_version="9.9")
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    low, high = artifact.supported_versions()
    assert _one_line(error) == (
        f"{copy / artifact.META_FILE}: serialized with JAX 9.9 at calling "
        f"convention version 99; JAX {jax.__version__} runs versions "
        f"{low} to {high}: export it again with this JAX"
    )


def test_other_calling_convention_in_serialized_header(copy):
    """An artifact serialized at another version (the header itself says
    so; predict.json tampered to agree on the bytes, not the version)."""
    path = copy / artifact.ARTIFACT_FILE
    loaded = jax.export.deserialize(bytearray(path.read_bytes()))
    other = dataclasses.replace(loaded, calling_convention_version=99)
    data = bytes(other.serialize())
    path.write_bytes(data)
    _rewrite_meta(copy, sha256=artifact.sha256(data), canvas_bytes=[len(data)])
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error).startswith(
        f"{path}: serialized with JAX ? at calling convention version 99;"
    )


@pytest.mark.parametrize(
    "images,sizes,message",
    [
        (
            np.zeros((1, 64, 64, 3), np.float32),
            np.ones((1, 2), np.int32),
            "images: expected float32[b, 128, 128, 3] (the artifact's "
            "canvas), got float32[1, 64, 64, 3]",
        ),
        (
            np.zeros((2, 128, 128, 3), np.uint8),
            np.ones((2, 2), np.int32),
            "images: expected float32[b, 128, 128, 3] (the artifact's "
            "canvas), got uint8[2, 128, 128, 3]",
        ),
        (
            np.zeros((2, 128, 128, 3), np.float32),
            np.ones((2,), np.int32),
            "image_sizes: expected int[2, 2] (height, width per image), "
            "got int32[2]",
        ),
        (
            np.zeros((1, 128, 128, 3), np.float32),
            np.full((1, 2), 129, np.int32),
            "image_sizes: each must fit the 128 x 128 input",
        ),
    ],
)
def test_wrong_input_size_or_dtype(exported_dir, images, sizes, message):
    loaded = artifact.load(exported_dir)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.run(loaded, images, sizes, np.ones_like(sizes))
    assert _one_line(error) == message
