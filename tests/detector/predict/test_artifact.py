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


@pytest.fixture
def format_2_copy(format_2_exported_dir, tmp_path):
    """A scratch copy of the format 2 artifact (weights in the function)."""
    target = tmp_path / "export_format_2"
    shutil.copytree(format_2_exported_dir, target)
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


def _meta(folder) -> dict:
    return json.loads((folder / artifact.META_FILE).read_text())


@pytest.mark.parametrize("cut", ["function", "weights"])
def test_truncated_artifact(copy, cut):
    """Cut inside the function, or 100 bytes off the weights section."""
    path = copy / artifact.ARTIFACT_FILE
    data = path.read_bytes()
    keep = 1000 if cut == "function" else len(data) - 100
    assert (keep > _meta(copy)["canvas_bytes"][0]) == (cut == "weights")
    path.write_bytes(data[:keep])
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error) == (
        f"{path}: its {keep} bytes differ from what export.py wrote "
        "(predict.json sha256): truncated or corrupt; export it again"
    )


def test_corrupt_artifact_whose_sha256_was_updated(copy):
    """Bytes that are no flatbuffer at all still fail in one line."""
    path = copy / artifact.ARTIFACT_FILE
    garbage = np.random.default_rng(0).bytes(4096)
    path.write_bytes(garbage)
    _rewrite_meta(
        copy,
        sha256=artifact.sha256(garbage),
        canvas_bytes=[len(garbage)],
        weights_bytes=0,
    )
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error).startswith(
        f"{copy / artifact.META_FILE}: canvas_bytes=[4096]: a function of "
        "predict.jax cut by these counts does not deserialize"
    )


def test_missing_meta(copy):
    (copy / artifact.META_FILE).unlink()
    with pytest.raises(artifact.ArtifactError, match="predict.json: missing"):
        artifact.load(copy)


def _as_format_1(folder) -> None:
    """The format 2 predict.json of `folder` as export.py wrote it before
    format_version (the one-canvas predict.jax is the same bytes)."""
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


def test_formats_1_and_2_load_and_run_as_before(
    format_2_copy, format_2_exported_dir
):
    """Weights inside the function, no weights section: the same bytes read
    as format 1 and as format 2 give the same outputs."""
    _as_format_1(format_2_copy)
    old, new = (
        artifact.load(format_2_copy),
        artifact.load(format_2_exported_dir),
    )
    assert old.weights is None and new.weights is None
    assert old.canvases == new.canvases == ((128, 128),)
    assert old.resize == new.resize
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (2, 128, 128, 3)).astype(np.float32)
    sizes = np.asarray([[128, 100], [90, 128]], np.int32)
    with jax.default_device(jax.devices("cpu")[0]):
        outputs = artifact.run(old, images, sizes, sizes)
        expected = artifact.run(new, images, sizes, sizes)
    assert (outputs["num_valid"] >= 15).all()
    for key in artifact.OUTPUTS:
        np.testing.assert_array_equal(outputs[key], expected[key], key)


def test_a_format_3_artifact_read_as_format_2_is_named(copy):
    meta = _meta(copy)
    _rewrite_meta(
        copy,
        format_version=2,
        canvas_bytes=[meta["canvas_bytes"][0] + meta["weights_bytes"]],
    )
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error) == (
        f"{copy / artifact.META_FILE}: format_version=2 but the functions "
        "of predict.jax take the weights as an argument; restore the "
        "exported value or export again"
    )


# The fixture's canvas is 128 x 128; BYTES stands for predict.jax's size,
# WEIGHTS for weights_bytes.
@pytest.mark.parametrize(
    "form,changes,message",
    [
        (
            3,
            {"canvases": [[64, 64]]},
            "canvases=[[64, 64]] differs from the input sizes [[128, 128]] "
            "of predict.jax; restore the exported value or export again",
        ),
        (
            1,
            {"image_size": [64, 64]},
            "image_size=[64, 64] differs from the input size [128, 128] of "
            "predict.jax; restore the exported value or export again",
        ),
        (
            2,
            {"canvas_bytes": [1000]},
            "canvas_bytes=[1000] add up to 1000 bytes, not the BYTES of "
            "predict.jax; restore the exported values or export again",
        ),
        (
            3,
            {"canvas_bytes": [1000]},
            "canvas_bytes=[1000] and weights_bytes=WEIGHTS add up to "
            "SUM bytes, not the BYTES of predict.jax; restore the exported "
            "values or export again",
        ),
        (
            3,
            {"weights_bytes": 8},
            "canvas_bytes=[FUNCTION] and weights_bytes=8 add up to SUM "
            "bytes, not the BYTES of predict.jax; restore the exported "
            "values or export again",
        ),
    ],
)
def test_edited_canvases_name_the_key_and_what_predict_jax_holds(
    copy, format_2_copy, form, changes, message
):
    folder = copy if form == 3 else format_2_copy
    if form == 1:
        _as_format_1(folder)
    _rewrite_meta(folder, **changes)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(folder)
    meta = _meta(folder)
    if form == 3:
        total = meta["canvas_bytes"][0] + meta["weights_bytes"]
        message = (
            message.replace("WEIGHTS", str(meta["weights_bytes"]))
            .replace("FUNCTION", str(meta["canvas_bytes"][0]))
            .replace("SUM", str(total))
        )
    size = (folder / artifact.ARTIFACT_FILE).stat().st_size
    assert _one_line(error) == (
        f"{folder / artifact.META_FILE}: {message.replace('BYTES', str(size))}"
    )


def test_weights_bytes_that_cut_into_the_function_are_named(copy):
    """The sections' sum kept, the boundary moved: the weights section no
    longer matches the types the function takes."""
    meta = _meta(copy)
    (function,) = meta["canvas_bytes"]
    _rewrite_meta(
        copy,
        canvas_bytes=[function + 8],
        weights_bytes=meta["weights_bytes"] - 8,
    )
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error) == (
        f"{copy / artifact.META_FILE}: weights_bytes="
        f"{meta['weights_bytes'] - 8} differs from the "
        f"{meta['weights_bytes']} bytes of the weights the functions of "
        "predict.jax take; restore the exported value or export again"
    )


def test_edited_categories_name_the_key(copy):
    _rewrite_meta(copy, categories=None)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error).startswith(
        f"{copy / artifact.META_FILE}: categories=None: must be a non-empty"
    )


def _tiny_function(canvas, weight_shape) -> bytes:
    """A serialized function of (weights, images, image_sizes, orig_sizes)
    on `canvas` whose one weight has `weight_shape`."""

    def fn(weights, images, image_sizes, orig_sizes):
        return {"num_valid": image_sizes[:, 0] + weights[0].size}

    (b,) = jax.export.symbolic_shape(artifact.SYMBOLIC_BATCH)
    exported = jax.export.export(jax.jit(fn), platforms=("cpu",))(
        [jax.ShapeDtypeStruct(weight_shape, np.float32)],
        jax.ShapeDtypeStruct((b, *canvas, 3), np.float32),
        jax.ShapeDtypeStruct((b, 2), np.int32),
        jax.ShapeDtypeStruct((b, 2), np.int32),
    )
    return bytes(exported.serialize())


def test_canvases_that_take_different_weights_are_named(copy):
    """Two canvases' functions whose weight arguments differ cannot share
    one weights section."""
    canvases = [[64, 128], [128, 64]]
    blobs = [
        _tiny_function(canvas, shape)
        for canvas, shape in zip(canvases, [(2,), (3,)], strict=True)
    ]
    path = copy / artifact.ARTIFACT_FILE
    data = b"".join(blobs) + bytes(8)
    path.write_bytes(data)
    _rewrite_meta(
        copy,
        canvases=canvases,
        canvas_bytes=[len(blob) for blob in blobs],
        weights_bytes=8,
        platforms=["cpu"],
        sha256=artifact.sha256(data),
    )
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.load(copy)
    assert _one_line(error) == (
        f"{path}: its functions take different weights; export it again"
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
    data = path.read_bytes()
    (count,) = _meta(copy)["canvas_bytes"]
    loaded = jax.export.deserialize(bytearray(data[:count]))
    other = bytes(
        dataclasses.replace(loaded, calling_convention_version=99).serialize()
    )
    data = other + data[count:]
    path.write_bytes(data)
    _rewrite_meta(copy, sha256=artifact.sha256(data), canvas_bytes=[len(other)])
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
