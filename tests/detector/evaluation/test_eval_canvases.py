"""Evaluation on orientation canvases: one predict program per canvas, the
results in image-id order and equal to one canvas that holds both
orientations (the model behaves as if each image were alone)."""

import json

import numpy as np
import pytest

pytest.importorskip("pycocotools.cocoeval")
pytest.importorskip("tensorflow")

from detector.distributed import sharding  # noqa: E402
from detector.evaluation import eval_lib  # noqa: E402
from detector.inference import detect  # noqa: E402
from detector.state import train_state as state_lib  # noqa: E402
from tests.helpers import groups, mixed_orientations  # noqa: E402

pytestmark = groups.EVAL_CANVASES

COUNT = 7  # images 2 and 5 are portrait
# float32 error between canvases on CPU: input pixels and box coordinates.
BOX_ATOL, SCORE_ATOL, METRIC_ATOL = 1e-3, 1e-5, 1e-6


def _config(root):
    """The grouped config on a CPU-sized model; frozen BatchNorm, whose
    output at a pixel does not depend on the canvas around the image."""
    config = mixed_orientations.grouped_config(root)
    config.data.eval_split = "val"
    model = config.model
    model.norm = "frozen_batch"
    model.backbone_width, model.fpn_channels = 8, 16
    model.roi.box_head_dim, model.roi.mask_head_dim = 32, 16
    model.detection.score_threshold = 0.0
    model.detection.max_detections = 100
    # Host NMS: the same boxes as the device kernels (tests/ops), and a
    # program that compiles in a fraction of Pallas' interpret mode's time.
    model.rpn.nms_backend = model.detection.nms_backend = "cpu"
    config.eval.num_visualized = 3
    return config


def _model(config):
    """(eval graphdef, params, rest) of a fresh random-init model."""
    graphdef, params, rest = state_lib.create_model(config, 0)
    return state_lib.eval_graphdef(graphdef, params, rest), params, rest


def _evaluate(config, workdir, model):
    """(summary, detections, predict) of `model` evaluated with `config`."""
    context = eval_lib.eval_context(config, sharding.make_mesh(), workdir)
    summary = eval_lib.evaluate(context, detect.Weights(*model))
    predict = context.predict
    stem = eval_lib.result_stem(workdir, "val")
    detections = json.loads(eval_lib.detections_path(stem).read_text())
    return summary, detections, predict


@pytest.fixture(name="runs", scope="module")
def runs_fixture(tmp_path_factory):
    """The grouped evaluation and the same model's on one 128 x 128 canvas."""
    root = tmp_path_factory.mktemp("mixed")
    mixed_orientations.write(root, "val", COUNT)
    grouped = _config(root)
    single = grouped.copy_and_resolve_references()
    single.data.group_orientations = False
    single.data.image_size = (128, 128)
    model = _model(grouped)  # the same weights on both
    return (
        _evaluate(grouped, tmp_path_factory.mktemp("grouped"), model),
        _evaluate(single, tmp_path_factory.mktemp("single"), model),
    )


def test_one_program_per_canvas(runs):
    (_, _, grouped), (_, _, single) = runs
    assert list(grouped.programs) == [(64, 128), (128, 64)]
    assert list(single.programs) == [(128, 128)]
    with pytest.raises(
        ValueError,
        match=r"^images on 32x32 have no compiled predict "
        r"\(canvases: 64x128, 128x64\)$",
    ):
        grouped.run((32, 32))


def test_detections_come_in_image_id_order(runs):
    (_, detections, _), _ = runs
    ids = [d["image_id"] for d in detections]
    assert ids == sorted(ids) and set(ids) == set(range(1, COUNT + 1))


def test_grouped_detections_and_metrics_equal_one_canvas(runs):
    (grouped, got, _), (single, want, _) = runs
    assert [d["image_id"] for d in got] == [d["image_id"] for d in want]
    assert [d["category_id"] for d in got] == [d["category_id"] for d in want]
    np.testing.assert_allclose(
        [d["bbox"] for d in got], [d["bbox"] for d in want], atol=BOX_ATOL
    )
    np.testing.assert_allclose(
        [d["score"] for d in got], [d["score"] for d in want], atol=SCORE_ATOL
    )
    for task in ("bbox", "segm"):
        assert single[task]["AR100"] > 0  # some detections match
        for name, value in single[task].items():
            assert grouped[task][name] == pytest.approx(
                value, abs=METRIC_ATOL
            ), (task, name)
