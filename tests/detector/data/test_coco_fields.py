"""Annotation values of the wrong type or range: one line, or a logged skip;
file names that lead outside the image folder are refused."""

import json
import os

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from detector.data import coco_checks, coco_folder
from tests.detector.data import helpers

POLYGON = [6.0, 4.0, 18.0, 4.0, 18.0, 12.0, 6.0, 12.0]  # 12 x 8 pixels


@pytest.fixture(name="folder")
def folder_fixture(tmp_path):
    helpers.write_colour_coded(str(tmp_path), "val", 3, 48, 60, seed=3)
    return tmp_path


def _edit(folder, edit) -> str:
    path = folder / "annotations" / "instances_val.json"
    dataset = json.loads(path.read_text())
    edit(dataset)
    path.write_text(json.dumps(dataset))
    return str(path)


@pytest.mark.parametrize(
    "records, key, value, what",
    [
        ("annotations", "iscrowd", "0", "0 or 1 (the integer)"),
        ("annotations", "iscrowd", "false", "0 or 1 (the integer)"),
        ("annotations", "iscrowd", 2, "0 or 1 (the integer)"),
        ("annotations", "area", "5", "a finite number"),
        ("annotations", "area", None, "a finite number"),
        (
            "annotations",
            "segmentation",
            [["6", "4", "18", "4", "18", "12"]],
            "polygons (lists of numbers) or an RLE object",
        ),
        (
            "annotations",
            "segmentation",
            "a polygon",
            "polygons (lists of numbers) or an RLE object",
        ),
        ("images", "height", "48", "a positive integer"),
        ("images", "width", 0, "a positive integer"),
        ("images", "file_name", 7, "a file name (a non-empty string)"),
    ],
)
def test_a_bad_value_is_one_line_naming_file_id_and_key(
    folder, records, key, value, what
):
    path = _edit(folder, lambda d: d[records][1].__setitem__(key, value))
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(folder), "val", 3)
    assert str(error.value) == (
        f"{path}: {records}[1] (id=2) {key}={value!r}: must be {what}"
    )


def test_every_field_of_the_table_is_tested():
    tested = {
        ("annotations", "iscrowd"),
        ("annotations", "area"),
        ("annotations", "segmentation"),
        ("images", "height"),
        ("images", "width"),
        ("images", "file_name"),
    }
    assert set(coco_checks.FIELDS) == tested


def test_a_non_positive_area_is_recomputed_with_a_log_line(folder, caplog):
    def edit(dataset):
        anns = dataset["annotations"]
        anns[0]["area"] = -5
        anns[0]["segmentation"] = [POLYGON]
        anns[1]["area"] = 0

    path = _edit(folder, edit)
    original = json.loads(
        (folder / "annotations" / "instances_val.json").read_text()
    )
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    anns = split.coco().anns
    assert anns[1]["area"] == 96  # the polygon's 12 x 8 pixels
    assert anns[2]["area"] > 0
    assert anns[3]["area"] == original["annotations"][2]["area"]
    assert (
        f"{path}: recomputed the zero or negative area of 2 annotations"
        in caplog.text
    )


def test_an_odd_length_polygon_is_skipped_and_logged(folder, caplog):
    path = _edit(
        folder,
        lambda d: d["annotations"][0].__setitem__(
            "segmentation", [POLYGON + [3.0]]
        ),
    )
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert 1 not in split.coco().anns
    assert (
        f"{path}: skipping annotation id=1 of image 1: odd-length polygon: "
        "9 coordinates, not x, y pairs"
    ) in caplog.text


@pytest.mark.parametrize("outside", ["../../../../etc/passwd", "/etc/passwd"])
def test_a_file_name_outside_the_image_folder_is_refused(folder, outside):
    path = _edit(
        folder, lambda d: d["images"][0].__setitem__("file_name", outside)
    )
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(folder), "val", 3)
    assert str(error.value) == (
        f"{path}: images (id=1) file_name={outside!r} leads outside the "
        f"image folder {os.path.join(folder, 'val')}; set "
        "config.data.allow_outside_images=True to read it"
    )


def test_the_config_switch_allows_files_outside(folder):
    image = folder / "val" / os.listdir(folder / "val")[0]
    moved = folder / "elsewhere.png"
    image.rename(moved)
    _edit(
        folder,
        lambda d: [
            im.__setitem__("file_name", str(moved))
            for im in d["images"]
            if im["file_name"] == image.name
        ],
    )
    with pytest.raises(ValueError, match="leads outside the image folder"):
        coco_folder.CocoFolder(str(folder), "val", 3)
    split = coco_folder.CocoFolder(
        str(folder), "val", 3, allow_outside_images=True
    )
    assert split.load_image(0).pixels.shape[:2] == (48, 60)


def test_a_subfolder_inside_the_image_folder_is_fine(folder):
    (folder / "val" / "sub").mkdir()
    first = sorted(os.listdir(folder / "val"))[0]
    (folder / "val" / first).rename(folder / "val" / "sub" / first)
    _edit(
        folder,
        lambda d: [
            im.__setitem__("file_name", f"sub/../sub/{first}")
            for im in d["images"]
            if im["file_name"] == first
        ],
    )
    coco_folder.CocoFolder(str(folder), "val", 3)


def _valid_counts(height: int, width: int) -> str:
    """The compressed counts of an all-ones mask of height x width."""
    mask = np.ones((height, width), np.uint8, order="F")
    return mask_utils.encode(mask)["counts"].decode("ascii")


@pytest.mark.parametrize(
    "segmentation, reason",
    [
        (
            {"size": [48, 60], "counts": "zzzz!!"},
            "invalid RLE counts: 'zzzz!!' is not a compressed RLE string "
            "('z' at 0 is outside '0'..'o')",
        ),
        (
            {"size": [48, 60], "counts": "P"},
            "invalid RLE counts: 'P' is not a compressed RLE string (cut "
            "inside a run)",
        ),
        (
            {"size": [48, 60], "counts": _valid_counts(10, 10)},
            "invalid RLE counts: the runs cover 100 pixels, not 48 * 60 = 2880",
        ),
        (
            {"size": [48, 60], "counts": [10, 5]},
            "invalid RLE counts: the runs cover 15 pixels, not 48 * 60 = 2880",
        ),
        (
            {"size": [48, 60], "counts": [-1, 2881]},
            "invalid RLE counts: a list of non-negative integers, not "
            "[-1, 2881]",
        ),
        (
            {"size": [48, 60], "counts": [1.5, 2878.5]},
            "invalid RLE counts: a list of non-negative integers",
        ),
        (
            {"size": [48, 60], "counts": 2880},
            "invalid RLE counts: a string or a list of integers, not 2880",
        ),
        (
            {"size": [48.0, 60], "counts": [2880]},
            "RLE size must be two positive integers (height, width): "
            "[48.0, 60]",
        ),
    ],
)
@pytest.mark.parametrize("iscrowd", [0, 1])
def test_a_malformed_rle_is_skipped_when_the_annotations_load(
    folder, caplog, segmentation, reason, iscrowd
):
    def edit(dataset):
        dataset["annotations"][0]["segmentation"] = segmentation
        dataset["annotations"][0]["iscrowd"] = iscrowd

    path = _edit(folder, edit)
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert (
        f"{path}: skipping annotation id=1 of image 1: {reason}"
    ) in caplog.text
    assert 1 not in split.coco().anns


@pytest.mark.parametrize(
    "counts", [_valid_counts(48, 60), [0, 2880], [100, 2000, 780]]
)
def test_a_valid_rle_passes_the_check(counts):
    assert (
        coco_checks.rle_problem({"size": [48, 60], "counts": counts}, 48, 60)
        is None
    )


def test_an_all_crowd_set_says_so_not_that_it_lacks_segmentations(
    folder, caplog
):
    path = _edit(
        folder,
        lambda d: [a.__setitem__("iscrowd", 1) for a in d["annotations"]],
    )
    with caplog.at_level("WARNING"):
        coco_folder.CocoFolder(str(folder), "val", 3)
    assert (
        f"{path}: all 9 annotations are crowd regions (no non-crowd "
        "instances); training without box and mask targets"
    ) in caplog.text
    assert "no instance segmentations" not in caplog.text


@pytest.mark.parametrize(
    "part, why",
    [
        ([30.0, 30.0, 40.0, 40.0], "2 points, not 3 or more"),
        (POLYGON + [3.0], "9 coordinates, not x, y pairs"),
    ],
)
def test_a_degenerate_part_of_a_polygon_drops_only_that_part(
    folder, caplog, part, why
):
    """As pycocotools and detectron2 read it: the instance stays, in the
    training targets and COCOeval's ground truth alike (the whole instance
    was once dropped as "empty segmentation")."""
    path = _edit(
        folder,
        lambda d: d["annotations"][0].__setitem__(
            "segmentation", [POLYGON, part]
        ),
    )
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert split.coco().anns[1]["segmentation"] == [POLYGON]
    masks = split.load_example(0)[3]
    assert masks[0].sum() == 12 * 8
    assert (
        f"{path}: annotation id=1 of image 1: polygon part 2 of 2 dropped "
        f"({why}); the other parts are kept"
    ) in caplog.text


def test_a_polygon_of_no_usable_part_is_still_skipped(folder, caplog):
    _edit(
        folder,
        lambda d: d["annotations"][0].__setitem__(
            "segmentation", [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0]]
        ),
    )
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert 1 not in split.coco().anns
    assert "id=1 of image 1: empty segmentation" in caplog.text
