"""curves.png: the plotted points are metrics.jsonl's and the eval
results', and the file is a PNG."""

import json

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("matplotlib")

from detector.evaluation import curves  # noqa: E402


def _write_run(workdir):
    """metrics.jsonl of 3 log steps and an eval at step 4 (one line cut
    short by a kill), and eval.py's result of step 2."""
    lines = [
        {
            "step": s,
            "total": 3.0 / s,
            "rpn_cls": 0.5 / s,
            "cls": 1.0 / s,
            "box": 0.2,
            "mask": 0.7,
            "rpn_box": 0.1,
            "learning_rate": 1e-3 * s,
            "grad_norm": 2.0,
            "nms_backend": "auto",
        }
        for s in (2, 4, 6)
    ]
    lines.insert(
        2,
        {
            "step": 4,
            "eval": True,
            "bbox": {"AP": 0.1, "AP50": 0.3},
            "segm": {"AP": 0.05},
        },
    )
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (workdir / "metrics.jsonl").write_text(text + '{"step": 8, "tot')
    (workdir / "eval_val_step2.json").write_text(
        json.dumps({"split": "val", "step": 2, "bbox": {"AP": 0.02}})
    )
    (workdir / "eval_other_step2.json").write_text(
        json.dumps({"split": "other", "step": 2, "bbox": {"AP": 0.9}})
    )
    return lines


def test_the_series_are_metrics_jsonl_and_the_results(tmp_path):
    lines = _write_run(tmp_path)
    got = curves.series(tmp_path, "eval_val")
    train = [line for line in lines if "eval" not in line]
    for name in (*curves.PANELS["loss"], "learning_rate"):
        assert got[name] == ([2, 4, 6], [line[name] for line in train]), name
    assert got["bbox AP"] == ([2, 4], [0.02, 0.1])
    assert got["segm AP"] == ([4], [0.05])
    assert "grad_norm" not in got


def test_curves_png_draws_exactly_those_points(tmp_path):
    _write_run(tmp_path)
    want = curves.series(tmp_path, "eval_val")
    figure = curves.figure(want)
    drawn = {
        line.get_label(): (
            list(line.get_xdata()),
            list(np.asarray(line.get_ydata(), float)),
        )
        for ax in figure.axes
        for line in ax.get_lines()
    }
    assert drawn == want
    assert [ax.get_title() for ax in figure.axes] == list(curves.PANELS)
    path = curves.draw(tmp_path, "eval_val")
    assert path == tmp_path / "curves.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    assert curves.note(tmp_path) == (
        f"curves: {path} (all events: tensorboard --logdir {tmp_path})"
    )


def test_nothing_to_draw_writes_nothing(tmp_path):
    assert curves.draw(tmp_path, "eval_val") is None
    assert not (tmp_path / "curves.png").exists()
