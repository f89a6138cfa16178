"""The artifact of a config with a landscape and a portrait canvas: one file
for both and every platform, each canvas's function equal to the model in
process and, within float rounding, to the model on one square canvas."""

import json
import pathlib

import jax
import numpy as np
import pytest

from detector import config as config_lib
from detector.export import exporter, in_process
from detector.imaging import images
from detector.predict import artifact, runner
from tests.helpers import groups

pytestmark = groups.GROUPED_EXPORTED

LANDSCAPE, PORTRAIT = (64, 128), (128, 64)  # make_grouped's canvases
SQUARE = (128, 128)  # holds an image of either canvas
# The square canvas against the grouped ones (same weights, CPU): its
# convolutions, anchors and NMS see the same image, so only float rounding
# differs (measured: boxes 1.5e-5 px, scores 1.2e-7, masks 6e-8).
BOX_ATOL, SCORE_ATOL = 1e-3, 1e-5


def _config(workdir: pathlib.Path):
    return config_lib.load_json(workdir / "config.json")


def _val(workdir: pathlib.Path) -> list[pathlib.Path]:
    """The data folder's "val" images: landscape, portrait, landscape..."""
    return sorted((pathlib.Path(_config(workdir).data.root) / "val").iterdir())


def _batches(workdir: pathlib.Path) -> dict[tuple[int, int], list]:
    """canvas -> two images of its orientation (96 x 128 or 128 x 96)."""
    by_canvas = {}
    for path in _val(workdir):
        pixels = images.read_decoded(path).pixels
        canvas = LANDSCAPE if pixels.shape[0] < pixels.shape[1] else PORTRAIT
        by_canvas.setdefault(canvas, []).append(pixels)
    return {canvas: found[:2] for canvas, found in by_canvas.items()}


def _inputs(predictor: runner.Predictor, pictures: list[np.ndarray]):
    """(images, resized sizes, original sizes) of `pictures` on the
    predictor's canvas for them, and that canvas."""
    sizes = [p.shape[:2] for p in pictures]
    (canvas,) = {predictor.canvas_of(size) for size in sizes}
    resized = [predictor.fitted_size(size) for size in sizes]
    placed = [
        images.place(p, size, canvas)
        for p, size in zip(pictures, resized, strict=True)
    ]
    return (
        np.stack(placed),
        np.asarray(resized, np.int32),
        np.asarray(sizes, np.int32),
    ), canvas


def test_one_file_serves_both_canvases_on_every_platform(grouped_exported_dir):
    meta = json.loads((grouped_exported_dir / artifact.META_FILE).read_text())
    assert meta["format_version"] == 3
    assert meta["canvases"] == [list(LANDSCAPE), list(PORTRAIT)]
    size = (grouped_exported_dir / artifact.ARTIFACT_FILE).stat().st_size
    assert len(meta["canvas_bytes"]) == 2
    assert sum(meta["canvas_bytes"]) + meta["weights_bytes"] == size
    assert meta["resize"] == {
        "rule": "shortest_edge",
        "min_size": 64,
        "max_size": 96,
    }
    loaded = artifact.load(grouped_exported_dir)
    assert loaded.canvases == (LANDSCAPE, PORTRAIT)
    for function, canvas in zip(loaded.functions, loaded.canvases, strict=True):
        assert function.platforms == ("cpu", "cuda", "tpu")
        assert tuple(function.in_avals[-3].shape[1:]) == (*canvas, 3)
        # The Mosaic NMS kernel at both NMS sites of each TPU lowering.
        assert function.mlir_module().count("tpu_custom_call") >= 2


def test_both_canvases_share_one_copy_of_the_weights(
    grouped_workdir, grouped_exported_dir
):
    """The weights section is the model's weights, once: the two-canvas
    file is under 1.2 times the one-canvas export of the same model (its
    landscape function and the same weights section)."""
    meta = json.loads((grouped_exported_dir / artifact.META_FILE).read_text())
    weights = exporter.restore(_config(grouped_workdir), grouped_workdir)
    leaves = jax.tree.leaves((weights.params, weights.rest))
    assert meta["weights_bytes"] == sum(leaf.nbytes for leaf in leaves)
    size = (grouped_exported_dir / artifact.ARTIFACT_FILE).stat().st_size
    assert size < 1.2 * (meta["canvas_bytes"][0] + meta["weights_bytes"])


@pytest.mark.slow  # four compiles; the square canvas below is one
def test_each_canvas_equals_the_in_process_model_on_cpu(
    grouped_workdir, grouped_exported_dir
):
    """Bit for bit, as the one-canvas artifact (test_export.py)."""
    exported = runner.artifact_predictor(artifact.load(grouped_exported_dir))
    local = in_process.predictor(_config(grouped_workdir), grouped_workdir)
    with jax.default_device(jax.devices("cpu")[0]):
        for expected_canvas, pictures in _batches(grouped_workdir).items():
            inputs, canvas = _inputs(exported, pictures)
            assert canvas == expected_canvas
            outputs, expected = exported.run(*inputs), local.run(*inputs)
            assert (outputs["num_valid"] >= 15).all()
            for key in artifact.OUTPUTS:
                np.testing.assert_array_equal(
                    outputs[key], expected[key], err_msg=f"{canvas} {key}"
                )


def test_each_canvas_equals_one_square_canvas(
    grouped_workdir, grouped_exported_dir
):
    """The same weights with one 128 x 128 canvas (in process): each image
    sized alike, and the same detections to float rounding."""
    config = _config(grouped_workdir)
    config.data.group_orientations = False
    config.data.image_size = SQUARE
    square = in_process.predictor(config, grouped_workdir)
    exported = runner.artifact_predictor(artifact.load(grouped_exported_dir))
    with jax.default_device(jax.devices("cpu")[0]):
        for pictures in _batches(grouped_workdir).values():
            inputs, _ = _inputs(exported, pictures)
            on_square, canvas = _inputs(square, pictures)
            assert canvas == SQUARE
            np.testing.assert_array_equal(inputs[1], on_square[1])
            outputs, expected = exported.run(*inputs), square.run(*on_square)
            for key in ("num_valid", "category_ids"):
                np.testing.assert_array_equal(outputs[key], expected[key])
            for key, atol in (
                ("boxes", BOX_ATOL),
                ("scores", SCORE_ATOL),
                ("masks", SCORE_ATOL),
            ):
                np.testing.assert_allclose(
                    outputs[key], expected[key], rtol=0, atol=atol, err_msg=key
                )


@pytest.mark.parametrize(
    "shape,sizes,message",
    [
        (
            (1, 64, 64, 3),
            [[64, 64]],
            "images: expected float32[b, 64, 128, 3] or float32[b, 128, 64, "
            "3] (the artifact's canvases), got float32[1, 64, 64, 3]",
        ),
        (
            (1, 128, 64, 3),
            [[64, 85]],
            "image_sizes: each must fit the 128 x 64 input",
        ),
    ],
)
def test_a_batch_on_no_canvas_served_is_one_error_line(
    grouped_exported_dir, shape, sizes, message
):
    loaded = artifact.load(grouped_exported_dir)
    sizes = np.asarray(sizes, np.int32)
    with pytest.raises(artifact.ArtifactError) as error:
        artifact.run(loaded, np.zeros(shape, np.float32), sizes, sizes)
    assert str(error.value) == message


def test_mixed_orientations_are_predicted_in_input_order(
    grouped_workdir, grouped_exported_dir, tmp_path
):
    """Batches of 2 of each canvas; predictions.json in the files' order,
    each file's detections at its own size."""
    exported = runner.artifact_predictor(artifact.load(grouped_exported_dir))
    paths = _val(grouped_workdir)
    out = tmp_path / "out"
    with jax.default_device(jax.devices("cpu")[0]):
        runner.predict_files(
            exported, [str(paths[0].parent)], out, batch_size=2
        )
    predictions = json.loads((out / runner.PREDICTIONS_FILE).read_text())
    assert list(predictions) == [str(p) for p in paths]
    for path, results in zip(paths, predictions.values(), strict=True):
        size = list(images.read_decoded(path).pixels.shape[:2])
        assert len(results) == 20  # untrained, score threshold 0
        assert all(r["segmentation"]["size"] == size for r in results)
