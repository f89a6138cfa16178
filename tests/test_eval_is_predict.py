"""Evaluation is predict on a split: the detections eval.py writes for an
image are the ones predict.py --workdir writes for that image's file, byte
for byte (one inference function, one placement, one formatter:
docs/architecture.md, "Inference")."""

import json
import pathlib
import shutil

import pytest
from PIL import Image

pytest.importorskip("pycocotools.cocoeval")

from detector import config as config_lib  # noqa: E402
from detector.evaluation import eval_lib  # noqa: E402
from detector.export import in_process  # noqa: E402
from detector.predict import runner  # noqa: E402
from tests.helpers import groups  # noqa: E402

pytestmark = groups.GROUPED_EXPORTED  # shares grouped_workdir


# A JPEG this many times a val image's size: decoded reduced (a quarter,
# no less than the 64-pixel short side it is resized to) by eval.py and
# predict.py alike.
JPEG_SCALE = 4


def _with_large_jpeg(
    root: pathlib.Path, copy: pathlib.Path, split: str
) -> None:
    """`root` copied to `copy`, with the first `split` image enlarged
    JPEG_SCALE times into large.jpg, an image of its own."""
    shutil.copytree(root, copy)
    annotations = copy / "annotations" / f"instances_{split}.json"
    ground_truth = json.loads(annotations.read_text())
    first = ground_truth["images"][0]
    with Image.open(copy / split / first["file_name"]) as image:
        height, width = image.height * JPEG_SCALE, image.width * JPEG_SCALE
        image.convert("RGB").resize((width, height), Image.BICUBIC).save(
            copy / split / "large.jpg", quality=90
        )
    ground_truth["images"].append(
        {
            "id": max(i["id"] for i in ground_truth["images"]) + 1,
            "file_name": "large.jpg",
            "height": height,
            "width": width,
        }
    )
    annotations.write_text(json.dumps(ground_truth))


def test_eval_detections_are_predict_detections_byte_for_byte(
    grouped_workdir, tmp_path
):
    """The grouped workdir's "val" files (both canvases, PNG) and a JPEG
    large enough to be decoded reduced: each image's results in eval's
    detections file, without the image id, are predict.py's list for its
    file, serialised alike."""
    workdir = tmp_path / "run"
    shutil.copytree(grouped_workdir, workdir)  # eval writes its results
    config = config_lib.load_json(workdir / "config.json")
    config.eval.num_visualized = 0
    root = tmp_path / "data"
    _with_large_jpeg(
        pathlib.Path(config.data.root), root, config.data.eval_split
    )
    config.data.root = str(root)
    eval_lib.evaluate_checkpoint(config, workdir)
    stem = eval_lib.result_stem(workdir, config.data.eval_split, config.data)
    evaluated = json.loads(eval_lib.detections_path(stem).read_text())

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
    assert predicted[str(root / config.data.eval_split / "large.jpg")]
    for path, results in predicted.items():
        image_id = ids[pathlib.Path(path).name]
        ours = [
            {k: v for k, v in r.items() if k != "image_id"}
            for r in evaluated
            if r["image_id"] == image_id
        ]
        assert json.dumps(ours) == json.dumps(results), path
