"""detector/config/: the sections' defaults, their one-line checks, and
config.json read back into the schema's types; the whole check of a run's
config (detector/launch/validate.py: the schema, then each registry name)."""

import json

import pytest

from detector import config as config_lib
from detector.config import model as model_config
from detector.evaluation import coco_backends
from detector.launch import validate


def test_the_schema_is_the_seed_and_one_entry_per_section():
    config = config_lib.base_config()
    assert set(config) == {"seed", *config_lib.SECTIONS}
    config_lib.check_schema(config)  # the defaults pass their own checks
    validate.validate(config)  # and name what the registries hold
    assert config.eval.coco_backend == coco_backends.DEFAULT


def test_the_schema_leaves_names_to_their_registries():
    """check_schema passes an unknown backbone; validate names it."""
    config = config_lib.base_config()
    config.model.backbone = "resnet34"
    config_lib.check_schema(config)
    with pytest.raises(ValueError, match=r"^config\.model\.backbone="):
        validate.validate(config)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("data.max_instances", 0, "must be in [1, 1000] (instances per image)"),
        ("data.num_classes", -1, "must be in [0, 10000]"),
        ("data.image_size", (1024,), "must be (height, width)"),
        ("data.train_image_size", (832,), "must be (height, width)"),
        ("data.train_image_size", (0, 832), "must be positive integers"),
        ("data.train_image_size", (800, 800), "divisible by the coarsest"),
        ("data.resize", "stretch", "must be one of letterbox, shortest"),
        ("data.min_size", (), "must be short sides: 1 or more integers"),
        ("data.min_size", (800, 0), "must be short sides: 1 or more integers"),
        ("data.max_size", 0, "must be in [1, 4096]"),
        ("model.roi.mask_size", 30, "must be 2 * model.roi.mask_pool_size"),
        ("model.dtype", "float16", "unknown dtype"),
        ("train.batch_size", 0, "must be in [1, 4096] (images per step)"),
        ("train.keep_checkpoints", 0, "must be in [1, 1000] (checkpoints kept"),
        ("eval.batch_size", 0, "must be in [1, 4096] (images per predict"),
        ("eval.mask_paste", "nearest", "unknown mask pasting"),
        ("eval.coco_backend", "lvis", "unknown COCOeval backend"),
        ("model.anchor_offset", 1.5, "must be in [0, 1)"),
        ("model.detection.min_box_size", -1.0, "must be >= 0"),
        ("model.roi.level_eps", -1e-6, "must be >= 0"),
        ("model.frozen_bn_epsilon", -1.0, "must be >= 0"),
        ("data.source", "csv", "is not one of shapes, coco_json, tfds"),
        ("data.shapes.image_size", 16, "must be >= 32"),
        ("model.backbone", "resnet34", "unknown backbone; known: resnet18"),
        ("model.norm", "layer", "unknown norm; known: group"),
        ("model.freeze_at", 6, "must be in [0, 5]"),
        ("model.fpn_norm", "layer", "known: auto, none"),
        ("model.roi.box_head", "2conv", "unknown box head; known: 2fc"),
        ("model.roi.box_head_norm", "auto", "unknown norm; known: none"),
        ("model.roi.align_implementation", "dense", "unknown ROIAlign"),
        ("model.rpn.nms_backend", "fast", "is not a known NMS backend"),
        ("model.detection.nms_backend", "fast", "known backends: auto"),
        ("model.loss.rpn_normaliser", "images", "known: slots, sampled"),
        ("model.loss.mask_target", "paste", "known: crop, torchvision"),
    ],
)
def test_a_bad_field_of_any_section_is_one_line_naming_it(key, value, words):
    config = config_lib.base_config()
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
        node = node[parent]
    node[leaf] = value
    with pytest.raises(ValueError) as error:
        validate.validate(config)
    message = str(error.value)
    assert message.startswith(f"config.{key}=") and words in message
    assert "\n" not in message


def test_a_training_canvas_of_its_own_is_refused_with_orientations():
    config = config_lib.base_config()
    config.data.resize = "shortest_edge"
    config.data.group_orientations = True
    config.data.image_size = (832, 1344)
    config.data.train_image_size = (832, 832)
    with pytest.raises(
        ValueError,
        match=r"^config\.data\.train_image_size=.*"
        r"orientation canvases",
    ):
        validate.validate(config)


def test_unknown_dtype_fails_with_one_line_naming_model_dtype():
    with pytest.raises(ValueError) as error:
        config_lib.resolve_dtype("fp16")
    message = str(error.value)
    assert message.startswith("config.model.dtype='fp16'")
    assert "auto" in message and "\n" not in message


@pytest.mark.parametrize(
    "norm, fpn, mask",
    [
        ("group", ("none", "group"), "group"),
        ("batch", ("none", "batch"), "batch"),
        ("sync_batch", ("none", "none"), "none"),
        ("frozen_batch", ("none", "none"), "none"),
    ],
)
def test_auto_head_norms_follow_the_2017_layouts(norm, fpn, mask):
    model = config_lib.base_config().model
    model.norm = norm
    assert model_config.fpn_norms(model) == fpn
    assert model_config.mask_head_norm(model) == mask
    model.fpn_norm = model.roi.mask_head_norm = "sync_batch"
    assert model_config.fpn_norms(model) == ("sync_batch", "sync_batch")
    assert model_config.mask_head_norm(model) == "sync_batch"


def test_config_json_reads_back_with_tuples(tmp_path):
    config = config_lib.base_config()
    config.data.image_size = (512, 640)
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    loaded = config_lib.load_json(path)
    assert loaded.data.image_size == (512, 640)
    assert loaded.to_dict() == config.to_dict()


def test_config_json_with_an_unknown_field_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": {"fpn_chanels": 128}}))
    with pytest.raises(ValueError, match=r"model\.fpn_chanels: not a config"):
        config_lib.load_json(path)
