"""predict_files with a stand-in model: what it reads, writes and counts."""

import dataclasses
import json
import os
import re
import signal
import socket

import numpy as np
import pytest
from PIL import Image

from detector.imaging import images
from detector.predict import draw, output_files, runner, stopping

IMAGE_SIZE = (64, 64)


def _run(batch, image_sizes, orig_sizes) -> dict[str, np.ndarray]:
    """One 20 x 10 detection at the top left of every image."""
    b = len(batch)
    return {
        "boxes": np.tile(np.float32([[0, 0, 20, 10]]), (b, 1, 1)),
        "scores": np.full((b, 1), 0.9, np.float32),
        "category_ids": np.ones((b, 1), np.int32),
        "masks": np.ones((b, 1, 28, 28), np.float32),
        "num_valid": np.ones(b, np.int32),
    }


PREDICTOR = runner.Predictor(
    images.Resize("letterbox"),
    (IMAGE_SIZE,),
    [{"id": 1, "name": "square"}],
    _run,
)


@pytest.fixture
def photos(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((40, 30, 3), 90, np.uint8)).save(folder / name)
    return folder


@pytest.mark.parametrize("out", ["photos", "."])
def test_an_out_that_holds_an_input_is_refused_and_nothing_is_written(
    photos, out
):
    before = {p.name: p.read_bytes() for p in photos.iterdir()}
    with pytest.raises(
        output_files.OutFolderError,
        match=r"^--out=.*: holds the input .*a\.png; .*name an --out outside",
    ):
        runner.predict_files(
            PREDICTOR, [str(photos)], photos.parent / out, batch_size=1
        )
    assert {p.name: p.read_bytes() for p in photos.iterdir()} == before


def test_an_input_reached_through_a_link_is_refused(photos, tmp_path):
    (tmp_path / "link.png").symlink_to(photos / "a.png")
    with pytest.raises(output_files.OutFolderError, match="link.png"):
        runner.predict_files(PREDICTOR, [str(tmp_path / "link.png")], photos)


def test_links_in_out_are_replaced_not_written_through(photos, tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    names = ("a.png", "predictions.json", "predictions.jsonl")
    for name in names:
        (outside / name).write_text("keep")
        (out / name).symlink_to(outside / name)
    # An earlier run's names: predict.py replaces only its own files.
    (out / runner.OVERLAYS_FILE).write_text(
        json.dumps({str(photos / "a.png"): "a.png"})
    )
    runner.predict_files(PREDICTOR, [str(photos / "a.png")], out)
    assert [p.read_text() for p in sorted(outside.iterdir())] == ["keep"] * 3
    assert not any((out / name).is_symlink() for name in names)
    assert Image.open(out / "a.png").format == "PNG"
    assert json.loads((out / "predictions.json").read_text())


def test_outputs_take_the_umask(photos, tmp_path):
    old = os.umask(0o022)
    try:
        runner.predict_files(PREDICTOR, [str(photos)], tmp_path / "out")
    finally:
        os.umask(old)
    modes = {
        p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()
    }
    assert set(modes.values()) == {0o644}, modes


def test_a_file_named_three_times_is_predicted_once_and_not_skipped(photos):
    a = str(photos / "a.png")
    summary = runner.predict_files(
        PREDICTOR, [a, a, str(photos)], photos.parent / "out"
    )
    assert (summary["images"], summary["skipped"]) == (2, 0)


def test_a_symlink_loop_in_a_folder_is_a_skipped_line(photos, capsys):
    (photos / "loop.png").symlink_to(photos / "loop.png")
    (photos / "gone.png").symlink_to(photos / "missing.png")
    summary = runner.predict_files(
        PREDICTOR, [str(photos)], photos.parent / "out"
    )
    assert (summary["images"], summary["skipped"]) == (2, 2)
    skipped = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].strip() for line in skipped] == [
        str(photos / "gone.png"),
        str(photos / "loop.png"),
    ]


def test_batches_hold_one_canvas_and_results_keep_the_input_order(tmp_path):
    """Landscape, portrait and square files at batch 2 on a landscape and a
    portrait canvas: each batch holds one canvas, each image sized against
    its own; predictions.json in input order, each file its own results."""
    canvases = ((32, 64), (64, 32))
    sizes = {
        "a.png": (40, 60),
        "b.png": (60, 40),
        "c.png": (50, 50),  # square: landscape
        "d.png": (60, 41),
        "e.png": (20, 60),
    }
    (tmp_path / "in").mkdir()
    for name, hw in sizes.items():
        pixels = np.full((*hw, 3), 90, np.uint8)
        Image.fromarray(pixels).save(tmp_path / "in" / name)
    calls = []

    def run(batch, image_sizes, orig_sizes):
        """Each image's box: the whole image."""
        calls.append((batch.shape[1:3], orig_sizes.tolist(), image_sizes))
        outputs = _run(batch, image_sizes, orig_sizes)
        outputs["boxes"][:, 0, 2:] = orig_sizes[:, ::-1]
        return outputs

    resize = images.Resize("shortest_edge", 32, 64)
    predictor = dataclasses.replace(
        PREDICTOR, resize=resize, canvases=canvases, run=run
    )
    out = tmp_path / "out"
    runner.predict_files(predictor, [str(tmp_path / "in")], out, batch_size=2)
    landscape, portrait = canvases
    batches = [
        (landscape, ["a.png", "c.png"]),
        (portrait, ["b.png", "d.png"]),
        (landscape, ["e.png"]),
    ]
    assert len(calls) == len(batches)
    for (shape, orig, resized), (canvas, names) in zip(
        calls, batches, strict=True
    ):
        assert shape == canvas
        assert orig == [list(sizes[n]) for n in names]
        expected = [images.fitted_size(sizes[n], resize, canvas) for n in names]
        np.testing.assert_array_equal(resized, expected)
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == [str(tmp_path / "in" / n) for n in sizes]
    for (height, width), (result,) in zip(
        sizes.values(), predictions.values(), strict=True
    ):
        assert result["bbox"] == [0.0, 0.0, width, height]


def test_a_second_run_on_one_out_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with (
        output_files.locked(out),
        pytest.raises(output_files.OutFolderError) as error,
        output_files.locked(out),
    ):
        pass
    assert re.fullmatch(
        re.escape(
            f"--out={out}: another predict.py run is using it (host "
            f"{socket.gethostname()} pid {os.getpid()}, started "
        )
        + r"[^;]+"
        + re.escape(
            f"; lock file {out / '.predict.lock'}); wait for it to end or "
            "choose another --out"
        ),
        str(error.value),
    ), str(error.value)
    assert not (out / ".predict.lock").exists()  # released


def _stopping(at: int, stop) -> tuple:
    """A stand-in run that calls `stop` on its `at`-th batch (1-based)."""
    calls = []

    def run(batch, image_sizes, orig_sizes):
        calls.append(len(batch))
        if len(calls) == at:
            stop()
        return _run(batch, image_sizes, orig_sizes)

    return dataclasses.replace(PREDICTOR, run=run), calls


def _interrupt() -> None:
    raise KeyboardInterrupt


@pytest.fixture
def three(photos):
    Image.fromarray(np.full((30, 40, 3), 60, np.uint8)).save(photos / "c.png")
    return photos


def _lines(out) -> list[dict]:
    text = (out / runner.RESULTS_FILE).read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_ctrl_c_keeps_the_finished_images_and_a_rerun_continues(
    three, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "predictions.json").write_text('{"old.png": []}')
    (out / runner.OVERLAYS_FILE).write_text("{}")  # an earlier run's
    predictor, _ = _stopping(2, _interrupt)
    with pytest.raises(runner.Interrupted) as stopped:
        runner.predict_files(predictor, [str(three)], out, batch_size=1)
    assert stopped.value.code == 130
    assert str(stopped.value) == (
        f"interrupted: 1 of 3 images predicted, kept in "
        f"{out / 'predictions.jsonl'}; rerun the same command to continue"
    )
    # The old run's file never sits beside this run's overlays.
    assert not (out / "predictions.json").exists()
    assert [line["file"] for line in _lines(out)] == [str(three / "a.png")]
    assert sorted(p.name for p in out.glob("*.png")) == ["a.png"]
    predictor, calls = _stopping(0, _interrupt)
    summary = runner.predict_files(predictor, [str(three)], out, batch_size=1)
    assert calls == [1, 1]
    assert (summary["images"], summary["resumed"]) == (3, 1)
    predictions = json.loads((out / "predictions.json").read_text())
    assert sorted(predictions) == [
        str(three / n) for n in ["a.png", "b.png", "c.png"]
    ]
    assert predictions[str(three / "a.png")][0]["bbox"] == [
        0.0,
        0.0,
        20.0,
        10.0,
    ]


def test_sigterm_stops_with_exit_code_143_keeping_the_finished(three, tmp_path):
    predictor, _ = _stopping(3, lambda: os.kill(os.getpid(), signal.SIGTERM))
    with stopping.signals_raise(), pytest.raises(runner.Interrupted) as e:
        runner.predict_files(
            predictor, [str(three)], tmp_path / "o", batch_size=1
        )
    assert e.value.code == 143
    assert str(e.value).startswith("interrupted: 2 of 3 images predicted")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigint_stops_even_where_it_was_started_ignored(three, tmp_path):
    """A background job of a script starts with SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler: predict.py sets its own."""
    predictor, _ = _stopping(2, lambda: os.kill(os.getpid(), signal.SIGINT))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stopping.signals_raise(), pytest.raises(runner.Interrupted) as e:
            runner.predict_files(
                predictor, [str(three)], tmp_path / "o", batch_size=1
            )
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert e.value.code == 130
    assert str(e.value).startswith("interrupted: 1 of 3 images predicted")


def test_a_rerun_redoes_only_changed_files_other_models_and_overwrite(
    three, tmp_path
):
    runner.predict_files(PREDICTOR, [str(three)], tmp_path / "o")

    def calls(**kwargs) -> list[int]:
        predictor, counted = _stopping(0, _interrupt)
        predictor = dataclasses.replace(
            predictor, identity=kwargs.pop("identity", "")
        )
        runner.predict_files(predictor, [str(three)], tmp_path / "o", **kwargs)
        return counted

    assert calls() == []
    Image.fromarray(np.full((40, 30, 3), 7, np.uint8)).save(three / "b.png")
    os.utime(three / "b.png", ns=(1, 1))  # another size and mtime
    assert calls() == [1]
    assert calls(overwrite=True) == [3]
    # The lines it replaced are dropped; b.png's of its old bytes stays.
    assert len(_lines(tmp_path / "o")) == 4
    assert calls(identity="another artifact") == [3]


def test_a_line_cut_short_by_a_kill_is_dropped(three, tmp_path):
    runner.predict_files(PREDICTOR, [str(three)], tmp_path / "o")
    with open(tmp_path / "o" / runner.RESULTS_FILE, "a") as f:
        f.write('{"file": "cut sh')
    Image.fromarray(np.full((30, 40, 3), 61, np.uint8)).save(three / "c.png")
    summary = runner.predict_files(PREDICTOR, [str(three)], tmp_path / "o")
    assert (summary["images"], summary["resumed"]) == (3, 2)
    assert len(_lines(tmp_path / "o")) == 4  # every line whole again


def test_an_empty_folder_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError) as error:
        runner.list_images([str(tmp_path / "empty")])
    assert str(error.value) == (
        f"no image files in {tmp_path / 'empty'}: name image files or "
        "folders that hold them"
    )


def test_nothing_predicted_is_an_error(tmp_path):
    (tmp_path / "in").mkdir()
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / "in" / name).write_bytes(b"not an image")
    with pytest.raises(ValueError) as error:
        runner.predict_files(PREDICTOR, [str(tmp_path / "in")], tmp_path / "o")
    assert str(error.value) == (
        "no image predicted: all 2 files were skipped (see the skipped: "
        "lines above)"
    )


@pytest.mark.parametrize(
    "summary, line",
    [
        ({"images": 3, "skipped": 0, "resumed": 0}, "3 images predicted"),
        (
            {"images": 3, "skipped": 2, "resumed": 1},
            "2 images predicted, 1 kept from an earlier run, 2 skipped "
            "(see the skipped: lines above)",
        ),
    ],
)
def test_the_last_line_says_what_was_skipped(summary, line, tmp_path):
    assert runner.summary_line(summary, tmp_path) == (
        f"{line}; wrote {tmp_path / 'predictions.json'}"
    )


def test_images_over_max_pixels_are_skipped_and_counted(photos, capsys):
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(photos / "c.png")
    summary = runner.predict_files(
        PREDICTOR, [str(photos)], photos.parent / "out", max_pixels=1000
    )
    assert (summary["images"], summary["skipped"]) == (1, 2)
    assert capsys.readouterr().err.splitlines() == [
        f"skipped: {photos / n}: 30 x 40 = 1200 pixels, over "
        "--max_pixels=1000; raise --max_pixels to read it (0: no limit)"
        for n in ("a.png", "b.png")
    ]


def test_a_large_jpeg_is_predicted_at_full_size_from_a_reduced_decode(
    tmp_path,
):
    """1200 x 1600 onto a 64 x 64 canvas: decoded at 1/8 (150 x 200), the
    model told the whole size, results in whole-image pixels, the overlay
    drawn at the photo's own size from a full decode."""
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "big.jpg"
    Image.fromarray(np.full((1200, 1600, 3), 90, np.uint8)).save(path)
    seen = []

    def run(batch, image_sizes, orig_sizes):
        seen.append((image_sizes.tolist(), orig_sizes.tolist()))
        return _run(batch, image_sizes, orig_sizes)

    predictor = dataclasses.replace(PREDICTOR, run=run)
    runner.predict_files(predictor, [str(path)], tmp_path / "out")
    assert seen == [([[48, 64]], [[1200, 1600]])]
    (result,) = json.loads((tmp_path / "out" / "predictions.json").read_text())[
        str(path)
    ]
    assert result["bbox"] == [0.0, 0.0, 20.0, 10.0]
    assert result["segmentation"]["size"] == [1200, 1600]
    overlay = Image.open(tmp_path / "out" / "big.png")
    assert overlay.size == (1600, 1200)
    # The box is drawn at 0..20 x 0..10 of the whole image, not 8 times
    # that (the reduced decode's pixels).
    pixels = np.asarray(overlay.convert("RGB"))
    assert (pixels[60:, 40:] == 90).all()


@pytest.mark.parametrize("size", [(381, 500), (500, 381), (40, 30)])
def test_an_overlay_is_the_photos_own_size(tmp_path, size):
    (tmp_path / "in").mkdir()
    Image.fromarray(np.full((*size, 3), 90, np.uint8)).save(
        tmp_path / "in" / "a.png"
    )
    runner.predict_files(PREDICTOR, [str(tmp_path / "in")], tmp_path / "out")
    height, width = size
    assert Image.open(tmp_path / "out" / "a.png").size == (width, height)


def _counted_run(out, args) -> tuple[dict, list[int]]:
    predictor, calls = _stopping(0, _interrupt)
    return runner.predict_files(predictor, args, out), calls


def test_a_photo_replaced_by_same_size_bytes_and_mtime_is_predicted_again(
    three, tmp_path
):
    out = tmp_path / "o"
    runner.predict_files(PREDICTOR, [str(three)], out)
    path = three / "b.png"
    before, stat = path.read_bytes(), path.stat()
    for value in range(256):  # another picture of the same byte count
        Image.fromarray(np.full((40, 30, 3), value, np.uint8)).save(path)
        if path.stat().st_size == stat.st_size and path.read_bytes() != before:
            break
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    summary, calls = _counted_run(out, [str(three)])
    assert calls == [1]
    assert summary["resumed"] == 2


def test_the_same_file_named_through_dot_dot_is_predicted_once(photos):
    out = photos.parent / "out"
    other = str(photos / ".." / photos.name / "a.png")
    summary = runner.predict_files(
        PREDICTOR, [str(photos / "a.png"), other], out
    )
    assert (summary["images"], summary["skipped"]) == (1, 0)
    assert sorted(p.name for p in out.glob("*.png")) == ["a.png"]
    # A rerun naming it the other way keeps it.
    summary, calls = _counted_run(out, [other])
    assert (calls, summary["resumed"]) == ([], 1)


def test_overlay_names_are_kept_across_runs_on_one_out(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for folder, value in ((d1, 10), (d2, 200)):
        folder.mkdir()
        Image.fromarray(np.full((40, 30, 3), value, np.uint8)).save(
            folder / "a.png"
        )
    out = tmp_path / "R"
    runner.predict_files(PREDICTOR, [str(d1 / "a.png")], out)
    first = (out / "a.png").read_bytes()
    runner.predict_files(PREDICTOR, [str(d2 / "a.png"), str(d1 / "a.png")], out)
    assert sorted(p.name for p in out.glob("*.png")) == ["a.png", "a_1.png"]
    assert (out / "a.png").read_bytes() == first  # still d1's
    recorded = json.loads((out / runner.OVERLAYS_FILE).read_text())
    assert recorded == {
        str(d1 / "a.png"): "a.png",
        str(d2 / "a.png"): "a_1.png",
    }


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"file": ["x"], "results": []}', "file"),
        ('{"file": "F", "sha256": "S", "model": "", "results": {}}', "results"),
        (
            '{"file": "F", "sha256": "S", "model": "", "results": [1]}',
            "results",
        ),
        ("[1, 2]", "not a JSON object"),
        ("not json", "not JSON"),
    ],
)
def test_a_malformed_results_line_is_dropped_and_its_image_predicted_again(
    three, tmp_path, capsys, line, why
):
    out = tmp_path / "o"
    runner.predict_files(PREDICTOR, [str(three)], out)
    log = out / runner.RESULTS_FILE
    lines = log.read_text().splitlines()
    record = json.loads(lines[1])
    line = line.replace('"F"', json.dumps(record["file"]))
    line = line.replace('"S"', json.dumps(record["sha256"]))
    log.write_text("\n".join([lines[0], line, lines[2]]) + "\n")
    capsys.readouterr()
    summary, calls = _counted_run(out, [str(three)])
    assert calls == [1]
    assert summary["resumed"] == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"{log}: line 2 dropped (")
    assert why in err[0]
    assert err[0].endswith("); its image is predicted again")
    predictions = json.loads((out / runner.PREDICTIONS_FILE).read_text())
    assert all(isinstance(v, list) for v in predictions.values())
    # The dropped line is gone from the file: a third run says nothing.
    _counted_run(out, [str(three)])
    assert capsys.readouterr().err == ""


def test_a_malformed_overlays_record_is_one_line_naming_it(photos, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / runner.OVERLAYS_FILE).write_text('{"a": 1}')
    with pytest.raises(ValueError) as error:
        runner.predict_files(PREDICTOR, [str(photos)], out)
    assert str(error.value) == (
        f"{out / runner.OVERLAYS_FILE}: not a JSON object of file: overlay "
        "name; remove it (the overlays' names are then chosen anew)"
    )


def test_terminal_escapes_in_printed_paths_are_escaped(tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "bad\x1b[2J\x07.png").write_bytes(b"no image")
    Image.fromarray(np.full((40, 30, 3), 90, np.uint8)).save(folder / "a.png")
    runner.predict_files(PREDICTOR, [str(folder)], tmp_path / "o")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "bad\\x1b[2J\\x07.png: cannot decode image" in err


def test_an_image_that_runs_out_of_memory_is_skipped_and_the_run_goes_on(
    photos, capsys, monkeypatch
):
    """A PNG bomb with --max_pixels=0: MemoryError while decoding one file."""
    from detector.imaging import image_file

    rgb = image_file._rgb

    def bomb(image):
        if image.size == (30, 40) and image.getpixel((0, 0))[0] == 7:
            raise MemoryError
        return rgb(image)

    monkeypatch.setattr(image_file, "_rgb", bomb)
    Image.fromarray(np.full((40, 30, 3), 7, np.uint8)).save(photos / "z.png")
    summary = runner.predict_files(
        PREDICTOR, [str(photos)], photos.parent / "out", max_pixels=0
    )
    assert (summary["images"], summary["skipped"]) == (2, 1)
    assert capsys.readouterr().err.splitlines() == [
        f"skipped: {photos / 'z.png'}: 30 x 40 pixels do not fit in memory "
        "to decode; free memory or leave this file out"
    ]


def test_a_full_disk_while_appending_results_names_the_file(
    photos, tmp_path, monkeypatch
):
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "o"
    monkeypatch.setattr(draw, "save_overlay", lambda *args: None)
    monkeypatch.setattr(
        runner.overlay_names,
        "assign",
        lambda out, paths: {p: f"{p.stem}.png" for p in paths},
    )
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as error:
        runner.predict_files(PREDICTOR, [str(photos)], out)
    assert error.value.filename == str(out / runner.RESULTS_FILE)


def _two_detections(batch, image_sizes, orig_sizes) -> dict[str, np.ndarray]:
    """A square at 0.9 and a circle at 0.3 in every image."""
    b = len(batch)
    return {
        "boxes": np.tile(
            np.float32([[0, 0, 20, 10], [5, 5, 15, 25]]), (b, 1, 1)
        ),
        "scores": np.tile(np.float32([0.9, 0.3]), (b, 1)),
        "category_ids": np.tile(np.int32([1, 2]), (b, 1)),
        "masks": np.ones((b, 2, 28, 28), np.float32),
        "num_valid": np.full(b, 2, np.int32),
    }


TWO = dataclasses.replace(
    PREDICTOR,
    categories=[{"id": 1, "name": "square"}, {"id": 2, "name": "circle"}],
    run=_two_detections,
)


@pytest.mark.parametrize(
    "filters, kept",
    [
        (runner.Filters(), [1, 2]),
        (runner.Filters(score_threshold=0.5), [1]),
        (runner.Filters(classes=frozenset({2})), [2]),
        (runner.Filters(0.5, frozenset({2})), []),
    ],
)
def test_score_and_class_filters_keep_results(photos, filters, kept):
    out = photos.parent / "out"
    runner.predict_files(TWO, [str(photos / "a.png")], out, filters=filters)
    (results,) = json.loads((out / "predictions.json").read_text()).values()
    assert [r["category_id"] for r in results] == kept


def test_a_rerun_with_other_filters_predicts_again(photos):
    out = photos.parent / "out"
    runner.predict_files(TWO, [str(photos)], out)
    summary = runner.predict_files(
        TWO, [str(photos)], out, filters=runner.Filters(0.5)
    )
    assert summary["resumed"] == 0


def test_classes_by_name_or_id_and_an_unknown_one_named():
    categories = TWO.categories
    assert runner.class_filter("square, 2", categories) == {1, 2}
    with pytest.raises(ValueError) as error:
        runner.class_filter("square,dog", categories)
    assert str(error.value) == (
        "--classes=square,dog: 'dog' is no category of the model (name or "
        "id of: 'square', 'circle')"
    )


def test_deeply_nested_overlays_json_is_named(tmp_path):
    from detector.predict import overlay_names

    (tmp_path / overlay_names.OVERLAYS_FILE).write_text("[" * 100_000)
    with pytest.raises(ValueError) as error:
        overlay_names.assign(tmp_path, [tmp_path / "a.jpg"])
    assert str(error.value).startswith(
        f"{tmp_path / overlay_names.OVERLAYS_FILE}: "
    )
    assert "remove it" in str(error.value)


def test_a_deeply_nested_results_line_is_dropped(tmp_path, capsys):
    from detector.predict import results_log

    path = tmp_path / "predictions.jsonl"
    path.write_text("[" * 100_000 + "\n")
    log = results_log.ResultsLog.open(path, "m")
    log.close()
    assert path.read_bytes() == b""
    assert "line 1 dropped (not JSON)" in capsys.readouterr().err


def test_results_belong_to_the_bytes_decoded_not_those_hashed_at_start(
    photos, tmp_path
):
    """b.png replaced after the run started (while a.png is predicted) and
    restored after it: the rerun predicts b.png again, as its kept results
    are the replacement's (they were once kept as the original's)."""
    b = photos / "b.png"
    original = b.read_bytes()

    def run(batch, image_sizes, orig_sizes):
        if b.read_bytes() == original:  # a's batch: replace b
            Image.fromarray(np.zeros((120, 160, 3), np.uint8)).save(b)
        return _run(batch, image_sizes, orig_sizes)

    replacing = dataclasses.replace(PREDICTOR, run=run)
    out = tmp_path / "out"
    runner.predict_files(replacing, [str(photos)], out, batch_size=1)
    b.write_bytes(original)
    summary = runner.predict_files(PREDICTOR, [str(photos)], out)
    assert (summary["images"], summary["resumed"]) == (2, 1)
    kept = json.loads((out / "predictions.json").read_text())
    assert kept[str(b)] == kept[str(photos / "a.png")]


def _photo(path, value: int = 90) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((40, 30, 3), value, np.uint8)).save(path)
    return str(path)


def test_a_predictions_json_predict_py_did_not_write_is_refused(tmp_path):
    """An --out holding another tool's predictions.json: one line naming
    it, and nothing there replaced (it once was, without a word)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "ok.png").write_bytes(b"mine")
    (out / "predictions.json").write_text('{"mine": 1}')
    with pytest.raises(output_files.OutFolderError) as error:
        runner.predict_files(
            PREDICTOR, [_photo(tmp_path / "in" / "ok.jpg")], out
        )
    assert str(error.value) == (
        f"--out={out}: {out / 'predictions.json'} was not written by "
        f"predict.py (no {runner.OVERLAYS_FILE} there records a run); move "
        "it away or choose another --out"
    )
    assert (out / "ok.png").read_bytes() == b"mine"
    assert (out / "predictions.json").read_text() == '{"mine": 1}'
    assert sorted(p.name for p in out.iterdir()) == [
        "ok.png",
        "predictions.json",
    ]


def test_an_overlay_name_taken_by_a_file_predict_py_did_not_write_is_not_used(
    tmp_path,
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "ok.png").write_bytes(b"mine")
    runner.predict_files(PREDICTOR, [_photo(tmp_path / "in" / "ok.jpg")], out)
    assert (out / "ok.png").read_bytes() == b"mine"
    assert Image.open(out / "ok_1.png").format == "PNG"
    # Its own overlay, recorded, is replaced by the next run.
    runner.predict_files(
        PREDICTOR, [str(tmp_path / "in" / "ok.jpg")], out, overwrite=True
    )
    assert sorted(p.name for p in out.glob("*.png")) == ["ok.png", "ok_1.png"]


def test_runs_into_one_out_add_up_in_predictions_json(tmp_path):
    """d1/a.png, then dd/a.png into one --out: predictions.json holds both
    (it once held only the last run's), as the overlays beside it do."""
    out = tmp_path / "R"
    first = _photo(tmp_path / "d1" / "a.png", 10)
    second = _photo(tmp_path / "dd" / "a.png", 200)
    runner.predict_files(PREDICTOR, [first], out)
    summary = runner.predict_files(PREDICTOR, [second], out)
    kept = json.loads((out / "predictions.json").read_text())
    assert list(kept) == [second, first]
    assert summary["earlier"] == 1
    assert runner.summary_line(summary, out) == (
        "1 image predicted; wrote "
        f"{out / 'predictions.json'} (2 images: 1 from earlier runs into "
        "this --out)"
    )
    # --overwrite predicts this run's files again and keeps the others'.
    runner.predict_files(PREDICTOR, [second], out, overwrite=True)
    assert list(json.loads((out / "predictions.json").read_text())) == [
        second,
        first,
    ]


def test_a_class_name_two_categories_share_is_named_and_ids_accepted():
    """--classes=facade once kept one of the two "facade" silently."""
    categories = [
        {"id": 1, "name": "facade"},
        {"id": 2, "name": "window"},
        {"id": 3, "name": "facade"},
    ]
    with pytest.raises(ValueError) as error:
        runner.class_filter("facade,window", categories)
    assert str(error.value) == (
        "--classes=facade,window: 'facade' names 2 categories of the model "
        "(ids 1, 3); name the one you mean by its id (--classes=3)"
    )
    assert runner.class_filter("3,window", categories) == {2, 3}


def test_a_fifo_named_as_an_input_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")
    with pytest.raises(ValueError) as error:
        runner.list_images([str(tmp_path / "pipe.jpg")])
    assert str(error.value) == (
        f"{tmp_path}/pipe.jpg: not a regular file (a FIFO)"
    )
