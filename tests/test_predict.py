"""export.py and predict.py as commands: outputs, skipped files, one-line
errors, and what `predict.py --exported` imports."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from tests.helpers import commands, groups

pytestmark = groups.EXPORTED

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Copies of one photo that keep the Ctrl-C test's run busy past its signal.
EXTRA = 40
# What `predict.py --exported` must run without.
BLOCKED = (
    "detector.modeling",
    "detector.config",
    "detector.engine",
    "detector.state",
    "detector.distributed",
    "detector.evaluation",
    "detector.export",
    "detector.data",
    "detector.launch.cli",
    "tensorflow",
    "flax",
    "orbax",
    "ml_collections",
    "optax",
)
_BLOCKER = f"""
import runpy, sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith({BLOCKED!r}):
            raise ImportError(f"{{name}} is blocked")
sys.meta_path.insert(0, _Block())
sys.path.insert(0, {str(ROOT)!r})
sys.argv = ["predict.py"] + sys.argv[1:]
runpy.run_path({str(ROOT / "predict.py")!r}, run_name="__main__")
"""


def _run(script: str, *args: str, blocked: bool = False):
    command = (
        [sys.executable, "-c", textwrap.dedent(_BLOCKER), *args]
        if blocked
        else [sys.executable, str(ROOT / script), *args]
    )
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> pathlib.Path:
    """RGB, grayscale, RGBA and EXIF-rotated files, and one unreadable."""
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (90, 150, 3), np.uint8)
    Image.fromarray(rgb).save(folder / "a_rgb.png")
    Image.fromarray(rgb[..., 0]).save(folder / "b_gray.png")
    rgba = np.concatenate([rgb, np.full((90, 150, 1), 200, np.uint8)], -1)
    Image.fromarray(rgba).save(folder / "c_rgba.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(folder / "d_rotated.jpg", exif=exif)
    (folder / "e_broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    return folder


def _check_outputs(
    out: pathlib.Path, photos: pathlib.Path, copies: Sequence[str] = ()
) -> dict:
    """predictions.json and the overlays of the readable photos (and of
    `copies`, more files in the same folder)."""
    predictions = json.loads((out / "predictions.json").read_text())
    names = ["a_rgb.png", "b_gray.png", "c_rgba.png", "d_rotated.jpg"]
    names += copies
    assert sorted(predictions) == sorted(str(photos / n) for n in names)
    rotated = predictions[str(photos / "d_rotated.jpg")]
    assert rotated and all(
        r["segmentation"]["size"] == [150, 90] for r in rotated
    )
    for results in predictions.values():
        assert len(results) == 20  # untrained, score threshold 0
        for r in results:
            x, y, w, h = r["bbox"]
            assert w >= 0 and h >= 0 and r["category_id"] in (1, 2, 3)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(
        ["a_rgb.png", "b_gray.png", "c_rgba.png", "d_rotated.png", *copies]
    )
    return predictions


def test_exported_predict_imports_no_model_and_skips_unreadable(
    exported_dir, photos, tmp_path
):
    out = tmp_path / "out"
    result = _run(
        "predict.py",
        f"--exported={exported_dir}",
        f"--out={out}",
        "--batch_size=3",
        str(photos),
        blocked=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    skipped = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("skipped")
    ]
    assert skipped == [
        f"skipped: {photos / 'e_broken.jpg'}: cannot decode image "
        "(cannot identify image file "
        f"'{photos / 'e_broken.jpg'}')"
    ]
    assert "4 images predicted, 1 skipped" in result.stdout
    assert "Unable to initialize backend" not in result.stderr
    _check_outputs(out, photos)


def test_an_out_holding_inputs_is_refused_before_loading(photos, tmp_path):
    """Refused before the artifact is read: --exported names no folder."""
    before = sorted(p.name for p in photos.iterdir())
    result = _run(
        "predict.py",
        f"--exported={tmp_path / 'none'}",
        f"--out={photos}",
        str(photos / "a_rgb.png"),
        blocked=True,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --out={photos}: holds the input {photos / 'a_rgb.png'}; "
        "the overlays and predictions.json would overwrite or mix with the "
        "inputs; name an --out outside every input folder"
    ]
    assert sorted(p.name for p in photos.iterdir()) == before


def test_an_out_that_is_a_file_is_refused_before_loading(tmp_path, photos):
    """--exported names no folder: the --out line comes first."""
    (tmp_path / "taken").write_text("")
    line = commands.error_line(
        _run(
            "predict.py",
            f"--exported={tmp_path / 'none'}",
            f"--out={tmp_path / 'taken'}",
            str(photos),
            blocked=True,
        )
    )
    assert line == (
        f"error: --out={tmp_path / 'taken'}: {tmp_path / 'taken'} is a "
        "file, not a folder; name a folder to write into"
    )


def test_an_out_in_use_is_refused_before_loading(tmp_path, photos):
    """A second predict.py on one --out names the holder; nothing loads."""
    from detector.predict import output_files

    out = tmp_path / "out"
    out.mkdir()
    with output_files.locked(out):
        line = commands.error_line(
            _run(
                "predict.py",
                f"--exported={tmp_path / 'none'}",
                f"--out={out}",
                str(photos),
                blocked=True,
            )
        )
    assert line.startswith(
        f"error: --out={out}: another predict.py run is using it (host "
    ), line
    assert f"pid {os.getpid()}," in line


def test_an_empty_folder_is_an_error_before_loading(tmp_path):
    (tmp_path / "empty").mkdir()
    line = commands.error_line(
        _run(
            "predict.py",
            f"--exported={tmp_path / 'none'}",
            f"--out={tmp_path / 'out'}",
            str(tmp_path / "empty"),
            blocked=True,
        )
    )
    assert line == (
        f"error: no image files in {tmp_path / 'empty'}: name image files "
        "or folders that hold them"
    )


def test_help_lists_the_flags_of_predict_py():
    text = _run("predict.py", "--help").stdout
    for flag in (
        "workdir",
        "exported",
        "out",
        "batch_size",
        "nms",
        "overwrite",
    ):
        assert re.search(rf"^  --(\[no\])?{flag}:", text, re.M), flag


def test_ctrl_c_keeps_what_finished_and_a_rerun_continues(
    exported_dir, photos, tmp_path
):
    """SIGINT once a batch is on disk: one line, exit 130; the same command
    predicts only the rest."""
    # The photos and EXTRA copies of one: a batch of one image takes a
    # fraction of a second, and the signal must come while work is left.
    folder = tmp_path / "photos"
    shutil.copytree(photos, folder)
    copies = [f"f_{i:02d}.png" for i in range(EXTRA)]
    for name in copies:
        shutil.copy(photos / "a_rgb.png", folder / name)
    total, readable = 5 + EXTRA, 4 + EXTRA
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(ROOT / "predict.py"),
        f"--exported={exported_dir}",
        f"--out={out}",
        "--batch_size=1",
        str(folder),
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    jsonl = out / "predictions.jsonl"
    deadline = time.monotonic() + 300
    while not (jsonl.exists() and jsonl.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"interrupted: \d+ of {total} images predicted, kept in "
        + re.escape(str(jsonl))
        + "; rerun the same command to continue",
        last,
    ), stderr[-3000:]
    assert "Traceback" not in stderr
    kept = int(last.split()[1])
    assert 1 <= kept < readable, last
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    new = f"{readable - kept} image{'' if readable - kept == 1 else 's'}"
    assert (
        f"{new} predicted, {kept} kept from an earlier run, 1 skipped"
        in result.stdout
    )
    _check_outputs(out, folder, copies)


def test_blocker_blocks():
    result = _run("", "--exported=x", blocked=True)
    assert result.returncode == 1
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            _BLOCKER.split("sys.argv")[0] + "import detector.modeling.model",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert "detector.modeling is blocked" in check.stderr


def test_truncated_artifact_is_one_error_line(exported_dir, photos, tmp_path):
    broken = tmp_path / "export"
    shutil.copytree(exported_dir, broken)
    artifact = broken / "predict.jax"
    artifact.write_bytes(artifact.read_bytes()[:5000])
    line = commands.error_line(
        _run("predict.py", f"--exported={broken}", str(photos), blocked=True)
    )
    assert line.startswith(f"error: {artifact}: its 5000 bytes differ")


@pytest.mark.slow  # in process: tests/detector/export/test_grouped_export.py
def test_exported_predict_on_two_canvases_keeps_the_input_order(
    grouped_exported_dir, tmp_path
):
    """A folder of landscape and portrait images, an artifact of both
    canvases, the model's imports blocked."""
    config = json.loads(
        (grouped_exported_dir.parent / "config.json").read_text()
    )
    paths = sorted((pathlib.Path(config["data"]["root"]) / "val").iterdir())
    out = tmp_path / "out"
    result = _run(
        "predict.py",
        f"--exported={grouped_exported_dir}",
        f"--out={out}",
        "--batch_size=2",
        str(paths[0].parent),
        blocked=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{len(paths)} images predicted;" in result.stdout
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == [str(p) for p in paths]
    sizes = {
        tuple(r["segmentation"]["size"]) for r in predictions[str(paths[1])]
    }
    assert sizes == {(128, 96)}  # the portrait one


@pytest.mark.slow  # the message itself: tests/detector/export/
def test_export_with_host_nms_is_one_error_line(trained_workdir, tmp_path):
    line = commands.error_line(
        _run(
            "export.py",
            f"--workdir={trained_workdir}",
            f"--out={tmp_path}/export",
            "--nms=cpu",
        )
    )
    assert line == (
        "error: --nms=cpu: the cpu NMS backend runs on the host through a "
        "host callback (jax.pure_callback), and host callbacks cannot be "
        "exported; use --nms=pallas, --nms=while_loop or --nms=auto"
    )
    assert not (tmp_path / "export").exists()


@pytest.mark.slow
def test_in_process_predict_equals_exported(
    trained_workdir, exported_dir, photos, tmp_path
):
    """predict.py --workdir and --exported write the same predictions."""
    outs = {}
    for form in (f"--workdir={trained_workdir}", f"--exported={exported_dir}"):
        out = tmp_path / form.split("=")[0].strip("-")
        result = _run(
            "predict.py", form, f"--out={out}", "--batch_size=3", str(photos)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        outs[form] = _check_outputs(out, photos)
    first, second = outs.values()
    assert first == second
