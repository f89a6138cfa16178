"""Torchvision's detections on photo files, through every path of ours.

The committed fixture (tests/data/photo_parity/, written by
tests/make_photo_parity_fixture.py: a reduced Mask R-CNN v1 with randomised
weights, sharp class heads and COCO's 10 unused ids held low) holds
torchvision's `model.eval()` outputs at its defaults (short side 800, long
side at most 1333, per-image clipping) on the JPEGs of
tests/helpers/photos.py: landscape, portrait, very wide, very small,
EXIF-rotated and grayscale. The test writes those files again and runs
configs/coco_r50_fpn.py:torchvision (the same reduced widths, 80 classes,
the fixture's weights through model.init_checkpoint) through
`predict.py --workdir`, `predict.py --exported` and eval.py's detections
file, then matches each of torchvision's detections to ours (same category,
box IoU >= 0.95; tests/helpers/photo_parity.py).

Targets, on CPU (float32): >= 99% of torchvision's detections matched per
path over all photos, scores within 1e-4, mask IoU >= 0.95; every box of
ours has positive area and lies inside its image. With torch installed,
the fixture is also regenerated and checked equal to the committed one.

Measured on the 2-core CPU VM (float32; torchvision 0.29.1, torch 2.14.1),
alike on all three paths (to the printed digits): 100 of torchvision's 100
detections matched on every photo, scores within 4e-6, mask IoU 1.000
(docs/torchvision-weights.md has the per-photo numbers; the :torchvision
variant's docstring what is left).
"""

import json
import pathlib

import numpy as np
import pytest

from detector.imaging import images
from tests.helpers import photo_parity, photos, requires, torch_process
from tests.helpers import torchvision_parity as parity

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/data/photo_parity/torchvision"
SCRIPT = ROOT / "tests/make_photo_parity_fixture.py"
MATCHED, SCORE_ERROR, MASK_IOU = 0.99, 1e-4, 0.95
SPLIT = "photos"


def _categories() -> list[dict]:
    from detector.weights import torchvision_maskrcnn

    return [
        {"id": i, "name": f"class_{i}"}
        for i in torchvision_maskrcnn.COCO_CATEGORY_IDS
    ]


def _overrides(root: pathlib.Path) -> dict:
    return {
        "model.init_checkpoint": FIXTURE.with_suffix(".safetensors"),
        "model.dtype": "float32",
        "data.root": root,
        "data.train_split": SPLIT,
        "data.eval_split": SPLIT,
        "eval.batch_size": 2,
        "eval.num_visualized": 0,
        **{f"model.{k}": v for k, v in parity.REDUCED.items()},
    }


def _run(*args: str) -> str:
    """A command of this repository in a child process (raises on failure)."""
    return torch_process.run(list(args), timeout=900)


def _write_config(workdir: pathlib.Path, root: pathlib.Path) -> None:
    from configs import coco_r50_fpn

    config = coco_r50_fpn.get_config("torchvision")
    for key, value in _overrides(root).items():
        node = config
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = str(value) if isinstance(value, pathlib.Path) else value
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.json").write_text(
        config.to_json_best_effort(indent=2, sort_keys=True) + "\n"
    )


def _by_name(predictions: dict) -> dict[str, list[dict]]:
    return {pathlib.Path(k).stem: v for k, v in predictions.items()}


def _report(path: str, stats: dict) -> str:
    lines = [f"{path}:"]
    for name, s in stats.items():
        lines.append(
            f"  {name:13s} torchvision {s.theirs:3d} ours {s.ours:3d} "
            f"matched {s.matched:6.1%} score error {s.score_error:.1e} "
            f"mask IoU {s.mask_iou:.3f}"
        )
    return "\n".join(lines)


def _misses(path: str, stats: dict) -> list[str]:
    """The targets `path` misses (module docstring), as lines."""
    total = sum(s.theirs for s in stats.values())
    matched = sum(s.matched * s.theirs for s in stats.values()) / total
    misses = []
    if total <= 50:
        misses.append(f"{path}: too few detections to compare ({total})")
    if matched < MATCHED:
        misses.append(f"{path}: {matched:.1%} matched")
    for name, s in stats.items():
        if s.score_error > SCORE_ERROR or s.mask_iou < MASK_IOU:
            misses.append(
                f"{path} {name}: score error {s.score_error:.1e}, "
                f"mask IoU {s.mask_iou:.3f}"
            )
    return misses


def test_photos_decode_as_the_fixture_saw_them(tmp_path):
    theirs = np.load(FIXTURE.with_suffix(".npz"))
    for name, path in photos.write(tmp_path).items():
        pixels = images.read_decoded(path).pixels
        assert tuple(theirs[f"{name}_size"]) == pixels.shape[:2]
        assert int(theirs[f"{name}_pixel_sum"]) == int(
            pixels.astype(np.int64).sum()
        ), f"{name}: this PIL decodes the photo differently"


@pytest.mark.slow
@requires.modules("pycocotools", "tensorflow")
def test_every_path_gives_torchvisions_detections(tmp_path):
    theirs = dict(np.load(FIXTURE.with_suffix(".npz")))
    root, workdir = tmp_path / "coco", tmp_path / "run"
    paths = photos.write_coco_folder(root, SPLIT, _categories())
    _write_config(workdir, root)
    sizes = {
        n: images.read_decoded(p).pixels.shape[:2] for n, p in paths.items()
    }
    results = {}

    _run(
        "predict.py",
        f"--workdir={workdir}",
        f"--out={tmp_path / 'in'}",
        "--batch_size=2",
        str(root / SPLIT),
    )
    results["predict.py --workdir"] = _by_name(
        json.loads((tmp_path / "in" / "predictions.json").read_text())
    )
    _run("export.py", f"--workdir={workdir}", f"--out={tmp_path / 'export'}")
    _run(
        "predict.py",
        f"--exported={tmp_path / 'export'}",
        f"--out={tmp_path / 'ex'}",
        "--batch_size=3",
        str(root / SPLIT),
    )
    results["predict.py --exported"] = _by_name(
        json.loads((tmp_path / "ex" / "predictions.json").read_text())
    )
    _run("eval.py", f"--workdir={workdir}")
    (detections,) = workdir.glob("eval_*.detections.json")
    names = {i: n for n, i in photos.ids().items()}
    per_image = {n: [] for n in paths}
    for r in json.loads(detections.read_text()):
        per_image[names[r["image_id"]]].append(r)
    results["eval.py detections"] = per_image

    misses = []
    for path, ours in results.items():
        for name, found in ours.items():
            photo_parity.check_results(found, *sizes[name])
        stats = photo_parity.compare(theirs, ours)
        print(_report(path, stats))
        misses += _misses(path, stats)
    assert not misses, "\n".join(misses)


@pytest.mark.slow
@torch_process.needs_torch
def test_fixture_is_torchvisions_output(tmp_path):
    folder = tmp_path / "photos"
    photos.write(folder)
    torch_process.run(
        [str(SCRIPT), f"--photos={folder}", f"--out={tmp_path / 'fx'}"]
    )
    fresh = np.load(tmp_path / "fx.npz")
    committed = np.load(FIXTURE.with_suffix(".npz"))
    assert set(fresh.files) == set(committed.files)
    for key in committed.files:
        np.testing.assert_allclose(
            fresh[key], committed[key], rtol=1e-5, atol=1e-4, err_msg=key
        )
