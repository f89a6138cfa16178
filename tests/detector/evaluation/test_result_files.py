"""Result files: an evaluation of other data never replaces the run's own
result, and every result records its data, split, step and checkpoint."""

import json
import re
import shutil

import pytest

pytest.importorskip("pycocotools.cocoeval")
pytest.importorskip("tensorflow")

from detector import config as config_lib  # noqa: E402
from detector.evaluation import eval_lib, result_names  # noqa: E402


def _data(source="coco_json", root="/data/coco", **fields):
    data = config_lib.base_config().data
    data.source, data.root = source, root
    for key, value in fields.items():
        data[key] = value
    return data


def _run(workdir, data) -> None:
    """A workdir whose config.json trained on `data`."""
    config = config_lib.base_config()
    config.data = data
    (workdir / "config.json").write_text(config.to_json())


def test_the_runs_own_data_keeps_eval_split_json(tmp_path):
    _run(tmp_path, _data())
    stem = eval_lib.result_stem(tmp_path, "val2017", _data())
    assert stem == tmp_path / "eval_val2017"
    # Training names its own data without a config to compare.
    assert eval_lib.result_stem(tmp_path, "val2017") == stem


@pytest.mark.parametrize(
    "data, name",
    [
        (_data(root="/mnt/other/coco2017/"), "eval_coco_json_coco2017_val2017"),
        (_data("shapes", "/tmp/shapes"), "eval_shapes_shapes_val2017"),
        (_data("tfds", tfds_name="coco/2017"), "eval_tfds_coco_2017_val2017"),
    ],
)
def test_other_data_gets_a_name_of_its_own(tmp_path, data, name):
    _run(tmp_path, _data())
    (tmp_path / "eval_val2017.json").write_text(
        json.dumps({"split": "val2017", **eval_lib.data_origin(_data())})
    )
    assert eval_lib.result_stem(tmp_path, "val2017", data).name == name


def test_a_result_of_other_data_under_the_same_name_is_not_overwritten(
    tmp_path,
):
    _run(tmp_path, _data())
    other = _data(root="/a/coco")
    stem = eval_lib.result_stem(tmp_path, "val2017", other)
    stem.with_suffix(".json").write_text(
        json.dumps(
            {"split": "val2017", **eval_lib.data_origin(_data(root="/b/coco"))}
        )
    )
    with pytest.raises(
        ValueError,
        match=r"eval_coco_json_coco_val2017\.json: holds the result of "
        r"coco_json data at /b/coco, not /a/coco",
    ):
        eval_lib.result_stem(tmp_path, "val2017", other)


def test_the_runs_summary_reads_only_its_own_datas_result(tmp_path):
    config = config_lib.base_config()
    config.data = _data()
    _run(tmp_path, _data())
    path = tmp_path / "eval_val2017.json"
    path.write_text(json.dumps({"split": "val2017", "bbox": {"AP": 0.5}}))
    assert eval_lib.saved_result(tmp_path, config) == {}  # no data recorded
    origin = eval_lib.data_origin(config.data)
    path.write_text(json.dumps({"split": "val2017", **origin, "step": 4}))
    assert eval_lib.saved_result(tmp_path, config)["step"] == 4


def test_results_larger_than_the_free_space_name_a_file_and_write_none(
    tmp_path, monkeypatch
):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        shutil, "disk_usage", lambda _: usage._replace(free=100)
    )
    stem = tmp_path / "eval_val"
    with pytest.raises(OSError) as error:
        eval_lib._write_result(stem, {"split": "val"}, "[" + "1," * 99 + "1]")
    assert error.value.filename == str(eval_lib.detections_path(stem))
    assert "No space left on device" in error.value.strerror
    assert list(tmp_path.iterdir()) == []


def test_the_result_line_names_the_step_and_the_files_written(tmp_path):
    config = config_lib.base_config()
    result = {"split": "val", "step": 3, "checkpoint": "c", "bbox": {"AP": 0.5}}
    line = eval_lib.result_line(tmp_path, config, result)
    assert line == "evaluated step 3 (c) on val: bbox AP 0.500; wrote nothing"
    for name in ("eval_val_step3.json", "eval_val_step3.png"):
        (tmp_path / name).write_text("{}")
    line = eval_lib.result_line(tmp_path, config, result, step_named=True)
    assert line.endswith(f"wrote {tmp_path}/eval_val_step3.json, .png")


def _config(**changes):
    config = config_lib.base_config()
    config.data = _data()
    for key, value in changes.items():
        section, field = key.rsplit(".", 1)
        node = config
        for name in section.split("."):
            node = node[name]
        node[field] = value
    return config


@pytest.mark.parametrize(
    "max_images, changes, settings, name",
    [
        (0, {}, {}, "eval_val2017"),
        (2, {}, {"eval.max_images": 2}, "eval_val2017_max_images-2"),
        (0, {"eval.num_visualized": 0}, {}, "eval_val2017"),
        (
            0,
            {
                "model.rpn.nms_backend": "while_loop",
                "model.detection.nms_backend": "while_loop",
            },
            {
                "model.detection.nms_backend": "while_loop",
                "model.rpn.nms_backend": "while_loop",
            },
            "eval_val2017_nms-while_loop",
        ),
        (
            3,
            {"model.detection.score_threshold": 0.5},
            {
                "eval.max_images": 3,
                "model.detection.score_threshold": 0.5,
            },
            "eval_val2017_max_images-3_score_threshold-0_5",
        ),
    ],
)
def test_a_setting_that_changes_the_result_enters_its_name(
    tmp_path, max_images, changes, settings, name
):
    """eval.py --max_images=2 (or --nms=) once overwrote the run's own
    eval_val2017.json, which train.py wrote."""
    _run(tmp_path, _data())
    config = _config(**changes)
    found = result_names.changed_settings(config, tmp_path, max_images)
    assert found == settings
    stem = eval_lib.result_stem(tmp_path, "val2017", config.data, None, found)
    assert stem.name == name
    assert stem.with_suffix(".json").name == f"{name}.json"


def test_many_changed_settings_name_a_digest():
    settings = {f"model.field_{i}": i for i in range(12)}
    name = result_names.suffix(settings)
    assert re.fullmatch(r"_settings-[0-9a-f]{8}", name), name
    assert result_names.suffix({}) == ""
