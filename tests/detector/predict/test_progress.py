"""predict.py's progress: lines with an ETA when piped, nothing when
quiet, and the last line's counts."""

import io

import numpy as np
from PIL import Image

from detector.predict import progress, runner
from tests.detector.predict.test_runner import PREDICTOR


def test_piped_progress_is_a_line_per_n_images_with_an_eta():
    stream, now = io.StringIO(), [0.0]
    shown = progress.Progress(50, every=20, stream=stream, clock=lambda: now[0])
    for _ in range(10):
        now[0] += 2.0  # 5 images every 2 s
        shown.advance(5)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "20 of 50 images done, 2.5 images/s, ETA 12 s"
    assert len(lines) == 3
    assert lines[-1].startswith("50 of 50 images done, ")
    assert "ETA" not in lines[-1]


def test_quiet_shows_nothing():
    stream = io.StringIO()
    shown = progress.Progress(50, quiet=True, every=1, stream=stream)
    shown.advance(50)
    assert stream.getvalue() == ""


def test_predict_files_reports_progress_unless_quiet(tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((40, 30, 3), i, np.uint8)).save(
            folder / f"{i}.png"
        )
    runner.predict_files(PREDICTOR, [str(folder)], tmp_path / "o")
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith("3 of 3 images done, ")
    )
    runner.predict_files(PREDICTOR, [str(folder)], tmp_path / "q", quiet=True)
    assert capsys.readouterr().out == ""


def test_the_last_line_counts_new_kept_and_skipped_images(tmp_path):
    def line(images, skipped, resumed):
        summary = {"images": images, "skipped": skipped, "resumed": resumed}
        return runner.summary_line(summary, tmp_path).split(";")[0]

    assert line(12, 0, 12) == (
        "no image predicted anew, 12 kept from an earlier run"
    )
    assert line(1, 0, 0) == "1 image predicted"
    assert line(4, 1, 1) == (
        "3 images predicted, 1 kept from an earlier run, 1 skipped (see the "
        "skipped: lines above)"
    )
