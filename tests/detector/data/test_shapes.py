"""Tests of the synthetic shapes writer: valid COCO, deterministic, CLI."""

import contextlib
import io
import json
import pathlib

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO

from detector.data import shapes_writer as shapes


def _load_coco(path) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


@pytest.fixture(name="written", scope="module")
def written_fixture(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    shapes.write_dataset(
        str(out), num_train=24, num_val=6, image_size=64, seed=3
    )
    return out


def test_json_loads_and_masks_match_boxes(written):
    coco = _load_coco(written / "annotations" / "instances_train.json")
    assert len(coco.imgs) == 24
    assert sorted(coco.cats) == [1, 2, 3]
    assert coco.anns, "no instances written"
    for ann in coco.anns.values():
        image = coco.imgs[ann["image_id"]]
        mask = coco.annToMask(ann)
        assert mask.shape == (image["height"], image["width"])
        rows = np.flatnonzero(mask.any(axis=1))
        cols = np.flatnonzero(mask.any(axis=0))
        x, y, w, h = ann["bbox"]
        # The box is the tight box of the mask, x + w exclusive.
        assert (x, y, x + w, y + h) == (
            cols[0],
            rows[0],
            cols[-1] + 1,
            rows[-1] + 1,
        )
        assert ann["area"] == mask.sum() > 0
        assert ann["iscrowd"] == 0
        assert ann["category_id"] in (1, 2, 3)


def test_images_on_disk_match_json(written):
    coco = _load_coco(written / "annotations" / "instances_val.json")
    for image in coco.imgs.values():
        pixels = np.asarray(Image.open(written / "val" / image["file_name"]))
        assert pixels.shape == (image["height"], image["width"], 3)
        assert pixels.dtype == np.uint8


def test_shapes_are_painted_where_their_masks_are(written):
    coco = _load_coco(written / "annotations" / "instances_train.json")
    for ann in list(coco.anns.values())[:20]:
        file_name = coco.imgs[ann["image_id"]]["file_name"]
        pixels = np.asarray(Image.open(written / "train" / file_name), float)
        inside = pixels[coco.annToMask(ann) > 0]
        # A shape is one flat colour over its visible mask.
        assert np.ptp(inside, axis=0).max() <= 1


def test_render_image_counts_and_empty_images():
    counts = []
    for index in range(200):
        _, instances = shapes.render_image(
            np.random.default_rng([7, index]), 48
        )
        counts.append(len(instances))
        for category, mask in instances:
            assert category in (1, 2, 3) and mask.any()
    assert max(counts) <= shapes.MAX_OBJECTS
    assert 0 in counts and max(counts) >= 4
    assert {c for c in counts if c > 0} == set(range(1, max(counts) + 1))


def test_deterministic_and_prefix_stable(tmp_path):
    shapes.write_split(str(tmp_path / "a"), "train", 5, image_size=48, seed=1)
    shapes.write_split(str(tmp_path / "b"), "train", 3, image_size=48, seed=1)
    shapes.write_split(str(tmp_path / "c"), "train", 3, image_size=48, seed=2)
    for name in ("000001.png", "000003.png"):
        a = (tmp_path / "a" / "train" / name).read_bytes()
        assert a == (tmp_path / "b" / "train" / name).read_bytes()

    def read(folder):
        path = tmp_path / folder / "annotations" / "instances_train.json"
        return json.loads(path.read_text())

    first_three = [a for a in read("a")["annotations"] if a["image_id"] <= 3]
    assert first_three == read("b")["annotations"]
    assert read("c")["annotations"] != read("b")["annotations"]


def test_split_is_current(tmp_path):
    out = str(tmp_path)
    assert not shapes.split_is_current(out, "val", 2, 48, 0)
    shapes.write_split(out, "val", 2, image_size=48, seed=0)
    assert shapes.split_is_current(out, "val", 2, 48, 0)
    assert not shapes.split_is_current(out, "val", 3, 48, 0)
    assert not shapes.split_is_current(out, "val", 2, 64, 0)
    assert not shapes.split_is_current(out, "val", 2, 48, 1)
    (tmp_path / "annotations" / "instances_val.json").write_text("{bad")
    assert not shapes.split_is_current(out, "val", 2, 48, 0)


def test_command_line(tmp_path):
    shapes.main(
        [
            "--out",
            str(tmp_path),
            "--num_train",
            "2",
            "--num_val",
            "1",
            "--image_size",
            "40",
            "--seed",
            "5",
        ]
    )
    assert shapes.split_is_current(str(tmp_path), "train", 2, 40, 5)
    assert shapes.split_is_current(str(tmp_path), "val", 1, 40, 5)
    assert len(list((tmp_path / "train").glob("*.png"))) == 2


def test_small_images_still_cover_a_pixel_per_shape():
    """At sizes where shapes are ~1 px across, none is rendered empty."""
    counts = 0
    for size in (6, 8, 12, 16):
        for index in range(60):
            _, instances = shapes.render_image(
                np.random.default_rng([7, index]), size
            )
            counts += len(instances)
            for _, mask in instances:
                assert mask.any(), (size, index)
    assert counts > 500


def test_image_size_lower_bound(tmp_path, capsys):
    with pytest.raises(
        ValueError,
        match=r"^image_size=16 is below the "
        r"minimum 32 pixels of the shapes images$",
    ):
        shapes.write_split(str(tmp_path), "train", 2, image_size=16)
    assert not (tmp_path / "train").exists()
    with pytest.raises(SystemExit):
        shapes.main(["--out", str(tmp_path), "--image_size", "8"])
    assert "--image_size=8 is below the minimum 32" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^split='test' is not one of"):
        shapes.write_split(str(tmp_path), "test", 2)
    shapes.write_split(
        str(tmp_path), "val", 1, image_size=shapes.MIN_IMAGE_SIZE
    )
    assert shapes.split_is_current(
        str(tmp_path), "val", 1, shapes.MIN_IMAGE_SIZE, 0
    )


@pytest.mark.parametrize(
    "content",
    [
        '{"images": [], "annotations": []}',
        '{"info": {"description": "COCO"}}',
        "[1, 2]",
        "{not json",
    ],
)
def test_foreign_json_is_never_overwritten(tmp_path, capsys, content):
    path = tmp_path / "annotations" / "instances_val.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(ValueError) as error:
        shapes.write_split(str(tmp_path), "val", 1, image_size=32)
    assert str(error.value).startswith(
        f"{path}: exists and its 'info' does not name it a "
        "'flax-maskrcnn synthetic shapes' file; refusing to overwrite"
    )
    # What data.source='shapes' means, and how to read the folder instead.
    assert str(error.value).endswith(
        "data.source='shapes' (the :shapes variant) writes and trains on "
        "synthetic shapes; to train on this folder's data, use "
        "--config.data.source=coco_json (or drop :shapes)"
    )
    # The command line refuses before writing any split.
    with pytest.raises(SystemExit):
        shapes.main(
            [
                "--out",
                str(tmp_path),
                "--num_train",
                "1",
                "--num_val",
                "1",
                "--image_size",
                "32",
            ]
        )
    assert f"{path}: exists" in capsys.readouterr().err
    assert path.read_text() == content
    assert not (tmp_path / "annotations" / "instances_train.json").exists()
    assert not (tmp_path / "val").exists()


def test_rewrite_replaces_a_stale_shapes_json(tmp_path):
    path = shapes.write_split(str(tmp_path), "val", 2, image_size=32)
    shapes.write_split(str(tmp_path), "val", 3, image_size=32)
    assert shapes.split_is_current(str(tmp_path), "val", 3, 32, 0)
    assert len(json.loads(pathlib.Path(path).read_text())["images"]) == 3
    assert not list((tmp_path / "annotations").glob("*.tmp-*"))


def test_a_coco_folder_as_the_shapes_root_says_shapes_are_synthetic(tmp_path):
    path = tmp_path / "annotations" / "instances_train2017.json"
    path.parent.mkdir()
    path.write_text('{"info": {"description": "COCO 2017"}, "images": []}')
    with pytest.raises(ValueError) as error:
        shapes.check_root(str(tmp_path))
    assert str(error.value) == (
        f"data.root={tmp_path}: holds {path.name}, which the shapes writer "
        "did not write; data.source='shapes' (the :shapes variant) writes "
        "and trains on synthetic shapes; to train on this folder's data, "
        "use --config.data.source=coco_json (or drop :shapes)"
    )
    shapes.write_split(str(tmp_path / "own"), "val", 1, image_size=32)
    shapes.check_root(str(tmp_path / "own"))  # its own files: fine
    shapes.check_root(str(tmp_path / "empty"))  # nothing there yet: fine
