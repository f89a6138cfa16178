"""detector/weights/torchvision_maskrcnn.py: torchvision's Mask R-CNN weights.

The committed fixture (data/torchvision_maskrcnn.*, written by
make_torchvision_fixture.py: a reduced Mask R-CNN v1 with randomised
weights, BatchNorm statistics and heads, a 2 x 3 x 192 x 192 input whose
second image is padded, and torchvision 0.29.1's outputs) is compared in
the default suite without torch; the tests marked `torch` rebuild it, and
the full-width R50 at 512 x 512, in a child process.

Tolerances (CPU, float32, the device pinned to the CPU), set from the
measured error:
- FPN levels and RPN objectness / deltas per level: max |ours - theirs| /
  max |theirs| <= 1e-5 (measured <= 1e-6 reduced, <= 2.2e-6 full R50);
- proposals: of the unpadded image, >= 99% of torchvision's matched by one
  of ours at IoU >= 0.99 (measured 100%); of the padded image >= 90%
  (measured 100% reduced, 95.1% full width: anchors over the zero padding
  tie exactly, and torch and XLA break ties differently; the detections
  still all match);
- detections: >= 98% matched (same label, IoU >= 0.99; measured 100%),
  score difference <= 1e-5 (measured 1e-6);
- pasted masks: per-detection IoU >= 0.98 (measured >= 0.994: a pixel
  whose probability is within float error of 0.5 may flip).

The fixture's BatchNorm epsilon is 0, as torchvision sets it for its COCO
weights; our model with the default 1e-5 misses the FPN tolerance
(measured 1.7e-5), as it misses the detections without the anchor, ROIAlign
or rounding switches of the :torchvision variant.
"""

import logging
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs import coco_r50_fpn
from detector.state import warm_start
from detector.weights import torchvision_maskrcnn as tv
from tests.helpers import torch_process
from tests.helpers import torchvision_parity as parity

DATA = pathlib.Path(__file__).parent / "data"
FIXTURE = DATA / "torchvision_maskrcnn"
SIZE = 192  # make_torchvision_fixture.py's default --size

FEATURE_TOLERANCE = 1e-5
PROPOSALS_MATCHED = (0.99, 0.90)  # unpadded, padded image
DETECTIONS_MATCHED = 0.98
SCORE_TOLERANCE = 1e-5
MASK_IOU = 0.98

needs_torch = torch_process.needs_torch


def _check(errors: dict[str, float]) -> None:
    for name, value in errors.items():
        if name.startswith(("fpn_", "rpn_")):
            assert value <= FEATURE_TOLERANCE, (name, value)
    for b, minimum in enumerate(PROPOSALS_MATCHED):
        assert errors[f"proposals_{b}"] >= minimum, errors
    assert errors["detections_total"] > 0, errors
    assert errors["detections_matched"] >= DETECTIONS_MATCHED, errors
    assert errors["score_error"] <= SCORE_TOLERANCE, errors
    assert errors["mask_iou"] >= MASK_IOU, errors


def test_reduced_model_matches_torchvision_fixture():
    model = parity.our_model(
        FIXTURE.with_suffix(".safetensors"), size=SIZE, width="reduced"
    )
    _check(parity.measure(model, np.load(FIXTURE.with_suffix(".npz"))))


@needs_torch
def test_fixture_script_rewrites_the_committed_fixture(tmp_path):
    """The same weights and input; torchvision's outputs to float error
    (another CPU or thread count may sum in another order)."""
    torch_process.write_fixture(tmp_path / "fx", width="reduced", size=SIZE)
    weights = load_file(tmp_path / "fx.safetensors")
    committed_weights = load_file(FIXTURE.with_suffix(".safetensors"))
    assert weights.keys() == committed_weights.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, committed_weights[name], name)
    ours, committed = (
        np.load(p.with_suffix(".npz")) for p in (tmp_path / "fx", FIXTURE)
    )
    assert sorted(ours.files) == sorted(committed.files)
    np.testing.assert_array_equal(ours["images"], committed["images"])
    for name in ours.files:
        if name.startswith(("fpn_", "rpn_")):
            np.testing.assert_allclose(
                ours[name], committed[name], rtol=1e-4, atol=1e-5, err_msg=name
            )


@needs_torch
@pytest.mark.slow
def test_full_width_r50_matches_torchvision(tmp_path):
    """maskrcnn_resnet50_fpn itself, 2 x 3 x 512 x 512, one image padded."""
    torch_process.write_fixture(tmp_path / "r50", width="full", size=512)
    model = parity.our_model(
        tmp_path / "r50.safetensors", size=512, width="full"
    )
    _check(parity.measure(model, np.load(tmp_path / "r50.npz")))


@torch_process.imports_torch  # reading .pth imports torch
def test_pth_reads_like_safetensors(tmp_path):
    state = load_file(FIXTURE.with_suffix(".safetensors"))
    torch_process.run(
        [
            "-c",
            "import sys, torch; from safetensors.torch import load_file; "
            "torch.save(load_file(sys.argv[1]), sys.argv[2])",
            str(FIXTURE.with_suffix(".safetensors")),
            str(tmp_path / "maskrcnn.pth"),
        ]
    )
    shapes = _shapes()
    config = _config(90)
    from_pth = tv.load(tmp_path / "maskrcnn.pth", config, shapes)
    from_safetensors = tv.load(
        FIXTURE.with_suffix(".safetensors"), config, shapes
    )
    assert from_pth.keys() == from_safetensors.keys()
    for name, array in from_pth.items():
        np.testing.assert_array_equal(array, from_safetensors[name])
    assert len(state) > 0


# ------------------------------------------------------------ mapping


def _config(num_classes: int, norm: str = "frozen_batch"):
    config = parity.config_for(
        FIXTURE.with_suffix(".safetensors"), size=SIZE, width="reduced"
    )
    config.data.num_classes = num_classes
    config.model.norm = norm
    return config


def _shapes(num_classes: int = 90) -> dict[str, tuple[int, ...]]:
    from flax import nnx

    from detector import factory

    abstract = nnx.eval_shape(
        lambda: factory.build_model(_config(num_classes), rngs=nnx.Rngs(0))
    )
    _, params, rest = nnx.split(abstract, nnx.Param, ...)
    return {
        name: tuple(leaf.shape)
        for name, leaf in {
            **warm_start.flat(params),
            **warm_start.flat(rest),
        }.items()
    }


def _state() -> dict[str, np.ndarray]:
    return load_file(FIXTURE.with_suffix(".safetensors"))


def _load(state, tmp_path, num_classes=90, norm="frozen_batch"):
    path = tmp_path / "maskrcnn.safetensors"
    save_file(state, path)
    return tv.load(path, _config(num_classes, norm), _shapes(num_classes))


def _error(state, tmp_path, match, **kwargs) -> str:
    with pytest.raises(ValueError, match=match) as info:
        _load(state, tmp_path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"config.model.init_checkpoint='{tmp_path}/maskrcnn.safetensors': "
    )
    return message


def test_coco_80_classes_take_their_category_rows(tmp_path, caplog):
    state = _state()
    arrays = _load(state, tmp_path, num_classes=80)
    ids = np.asarray(tv.COCO_CATEGORY_IDS)
    assert len(ids) == 80 and ids[-1] == 90 and 12 not in ids
    cls_w = state["roi_heads.box_predictor.cls_score.weight"].astype(np.float32)
    np.testing.assert_array_equal(
        arrays["roi_heads/box_head/classes/kernel"], cls_w[np.r_[0, ids]].T
    )
    box_w = state["roi_heads.box_predictor.bbox_pred.weight"].astype(np.float32)
    rows = (4 * ids[:, None] + np.arange(4)).ravel()
    np.testing.assert_array_equal(
        arrays["roi_heads/box_head/deltas/kernel"], box_w[rows].T
    )
    mask_b = state["roi_heads.mask_predictor.mask_fcn_logits.bias"]
    np.testing.assert_array_equal(
        arrays["roi_heads/mask_head/logits/bias"], mask_b[ids]
    )


def test_other_class_counts_keep_fresh_class_heads(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    arrays = _load(_state(), tmp_path, num_classes=3)
    for prefix in (
        "roi_heads/box_head/classes",
        "roi_heads/box_head/deltas",
        "roi_heads/mask_head/logits",
    ):
        assert not any(name.startswith(prefix) for name in arrays)
    assert "roi_heads/box_head/fc1/kernel" in arrays
    assert "data.num_classes=3 has no mapping" in caplog.text


def test_fc6_rows_are_permuted_to_channels_last(tmp_path):
    state = _state()
    arrays = _load(state, tmp_path)
    fc6 = state["roi_heads.box_head.fc6.weight"].astype(np.float32)
    channels, pool = parity.REDUCED["fpn_channels"], 7
    # Our input row (y, x, c) is torchvision's column c * 49 + y * 7 + x.
    y, x, c = 3, 5, 17
    np.testing.assert_array_equal(
        arrays["roi_heads/box_head/fc1/kernel"][(y * pool + x) * channels + c],
        fc6[:, c * pool * pool + y * pool + x],
    )


def test_old_torchvision_names_are_read(tmp_path):
    state = _state()
    renamed = {}
    for name, value in state.items():
        name = name.replace("rpn.head.conv.0.0.", "rpn.head.conv.")
        for i in range(4):
            name = name.replace(
                f"roi_heads.mask_head.{i}.0.",
                f"roi_heads.mask_head.mask_fcn{i + 1}.",
            )
        renamed[name] = value
    arrays = _load(renamed, tmp_path)
    np.testing.assert_array_equal(
        arrays["roi_heads/mask_head/convs/2/bias"],
        state["roi_heads.mask_head.2.0.bias"].astype(np.float32),
    )


def test_data_parallel_prefix_is_stripped_with_a_log_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    state = {f"module.{k}": v for k, v in _state().items()}
    assert "rpn/head/conv/kernel" in _load(state, tmp_path)
    assert "stripped the DataParallel prefix 'module.'" in caplog.text


def test_v2_faster_and_keypoint_files_are_named(tmp_path):
    v2 = dict(_state())
    v2["roi_heads.box_head.0.0.weight"] = np.zeros((32, 32, 3, 3), np.float32)
    message = _error(v2, tmp_path, "maskrcnn_resnet50_fpn_v2 file needs")
    assert "model.norm='batch' or 'sync_batch', not 'frozen_batch'" in message
    keypoint = dict(_state())
    keypoint["roi_heads.keypoint_predictor.kps_score_lowres.weight"] = np.zeros(
        (32, 17, 4, 4), np.float32
    )
    _error(keypoint, tmp_path, "a Keypoint R-CNN")
    faster = {
        k: v for k, v in _state().items() if not k.startswith("roi_heads.mask")
    }
    _error(faster, tmp_path, "a Faster R-CNN")


def test_every_mapping_failure_is_one_line(tmp_path):
    state = dict(_state())
    state["rpn.head.cls_logits.weight"] = np.zeros((5, 32, 1, 1), np.float32)
    _error(
        state,
        tmp_path,
        r"rpn\.head\.cls_logits\.weight has shape \(5, 32, 1, 1\), but our "
        r"rpn/head/objectness/kernel \(32, 3\) needs \(3, 32, 1, 1\)$",
    )
    state = dict(_state())
    del state["backbone.fpn.layer_blocks.2.0.bias"]
    _error(
        state,
        tmp_path,
        r"backbone\.fpn\.layer_blocks\.2\.0\.bias is missing \(our "
        r"fpn/output/2/bias needs \(32,\)\)$",
    )
    state = dict(_state(), **{"extra.weight": np.zeros(3, np.float32)})
    _error(state, tmp_path, r"first: extra\.weight of shape \(3,\)\)$")
    state = dict(_state())
    state["roi_heads.box_predictor.cls_score.weight"] = np.zeros(
        (81, 64), np.float32
    )
    _error(state, tmp_path, r"cls_score\.weight has shape \(81, 64\), not 91")
    _error(_state(), tmp_path, "needs model.norm='frozen_batch'", norm="group")


def test_damaged_values_name_the_first_bad_tensor(tmp_path):
    state = dict(_state())
    bad = state["rpn.head.bbox_pred.weight"].astype(np.float32)
    bad[1, 2, 0, 0] = np.nan
    state["rpn.head.bbox_pred.weight"] = bad
    _error(
        state,
        tmp_path,
        r"rpn\.head\.bbox_pred\.weight holds 1 non-finite values "
        r"\(first: nan\)",
    )
    state = dict(_state())
    var = state["backbone.body.layer2.0.bn1.running_var"].astype(np.float32)
    var[0] = -1.0
    state["backbone.body.layer2.0.bn1.running_var"] = var
    _error(
        state,
        tmp_path,
        r"backbone\.body\.layer2\.0\.bn1\.running_var holds negative running "
        r"variances \(min -1\)",
    )


def test_torchvision_variant_points_at_the_converted_file():
    config = coco_r50_fpn.get_config("torchvision")
    assert config.model.init_checkpoint == coco_r50_fpn.TORCHVISION_FILE
    assert config.model.backbone_init == ""
    assert config.data.num_classes == 80
    assert config.eval.mask_paste == "torchvision"
    assert not config.model.roi.aligned
    data = config.data
    assert (data.resize, data.min_size, data.max_size) == (
        "shortest_edge",
        (800,),
        1333,
    )


@pytest.mark.slow
def test_eval_runs_on_converted_weights_through_the_variant(tmp_path):
    """eval.py with no checkpoint evaluates the init_checkpoint model."""
    root = pathlib.Path(__file__).resolve().parents[3]
    overrides = {
        "model.init_checkpoint": FIXTURE.with_suffix(".safetensors"),
        "data.root": tmp_path / "shapes",
        "data.source": "shapes",
        "data.eval_split": "val",
        "data.train_split": "train",
        "data.num_classes": 3,
        "data.image_size": f"({SIZE},{SIZE})",
        "eval.batch_size": 2,
        "eval.num_visualized": 1,
        **{f"model.{k}": v for k, v in parity.REDUCED.items()},
    }
    (tmp_path / "run").mkdir()  # eval.py evaluates into a workdir there
    result = subprocess.run(
        [
            sys.executable,
            str(root / "eval.py"),
            f"--workdir={tmp_path / 'run'}",
            "--config=configs/coco_r50_fpn.py:torchvision",
            "--max_images=4",
            *(f"--config.{k}={v}" for k, v in overrides.items()),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "using the model started from model.init_checkpoint" in (
        result.stderr
    )
    assert list((tmp_path / "run").glob("eval_val*.json"))
