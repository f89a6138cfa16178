"""Evaluation is predict on a split: the detections eval.py writes for an
image are the ones predict.py --workdir writes for that image's file, byte
for byte (one inference function, one placement, one formatter:
docs/architecture.md, "Inference")."""

import json
import pathlib
import shutil

import pytest

pytest.importorskip("pycocotools.cocoeval")

from detector import config as config_lib  # noqa: E402
from detector.evaluation import eval_lib  # noqa: E402
from detector.export import in_process  # noqa: E402
from detector.predict import runner  # noqa: E402
from tests.helpers import groups  # noqa: E402

pytestmark = groups.GROUPED_EXPORTED  # shares grouped_workdir


def test_eval_detections_are_predict_detections_byte_for_byte(
    grouped_workdir, tmp_path
):
    """The grouped workdir's "val" files (both canvases, PNG): each
    image's results in eval's detections file, without the image id, are
    predict.py's list for its file, serialised alike."""
    workdir = tmp_path / "run"
    shutil.copytree(grouped_workdir, workdir)  # eval writes its results
    config = config_lib.load_json(workdir / "config.json")
    config.eval.num_visualized = 0
    eval_lib.evaluate_checkpoint(config, workdir)
    stem = eval_lib.result_stem(workdir, config.data.eval_split)
    evaluated = json.loads(eval_lib.detections_path(stem).read_text())

    root = pathlib.Path(config.data.root)
    out = tmp_path / "out"
    runner.predict_files(
        in_process.predictor(config, workdir),
        [str(root / config.data.eval_split)],
        out,
        batch_size=config.eval.batch_size,
        quiet=True,
    )
    predicted = json.loads((out / runner.PREDICTIONS_FILE).read_text())
    annotations = (
        root / "annotations" / f"instances_{config.data.eval_split}.json"
    )
    ids = {
        entry["file_name"]: entry["id"]
        for entry in json.loads(annotations.read_text())["images"]
    }
    assert len(predicted) == len(ids) > 2
    assert sum(map(len, predicted.values())) > 0
    for path, results in predicted.items():
        image_id = ids[pathlib.Path(path).name]
        ours = [
            {k: v for k, v in r.items() if k != "image_id"}
            for r in evaluated
            if r["image_id"] == image_id
        ]
        assert json.dumps(ours) == json.dumps(results), path
