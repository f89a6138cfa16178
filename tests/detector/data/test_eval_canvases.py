"""Eval batches on orientation canvases: each orientation's images in
contiguous per-process blocks on its canvas, as many batches of each
orientation on every process."""

import numpy as np
import pytest

from detector.data import eval_split
from tests.helpers import mixed_orientations

COUNT = 7  # images 2 and 5 are portrait


@pytest.fixture(name="config", scope="module")
def config_fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    mixed_orientations.write(root, "val", COUNT)
    config = mixed_orientations.grouped_config(root)
    config.data.eval_split = "val"
    return config


def _ids(batches) -> list[list[int]]:
    return [b["image_id"].tolist() for b in batches]


def test_one_process_yields_landscape_then_portrait_batches(config):
    split = eval_split.eval_split(config)
    batches = list(split.batches())
    assert _ids(batches) == [[1, 3], [4, 6], [7, -1], [2, 5]]
    assert split.num_batches == len(batches)
    assert split.image_ids == [1, 3, 4, 6, 7, 2, 5]
    shapes = [b["image"].shape[1:3] for b in batches]
    assert shapes == [(64, 128)] * 3 + [(128, 64)]
    # 96 x 128 and 128 x 96 originals at eval's shortest edge 64.
    assert batches[0]["image_size"].tolist() == [[64, 85], [64, 85]]
    assert batches[3]["image_size"].tolist() == [[85, 64], [85, 64]]
    padding = batches[2]
    assert padding["image_valid"].tolist() == [True, False]
    assert (padding["image"][1] == 0).all()


def test_processes_run_as_many_batches_of_each_canvas(config):
    parts = [
        eval_split.eval_split(config, process_index=p, process_count=2)
        for p in range(2)
    ]
    batches = [list(part.batches()) for part in parts]
    # Landscape: 5 images, 3 a process; portrait: 2 images, 1 a process.
    assert [_ids(b) for b in batches] == [
        [[1], [3], [4], [2]],
        [[6], [7], [-1], [5]],
    ]
    for part, own in zip(parts, batches, strict=True):
        assert part.num_batches == len(own) == 4
        assert [b["image"].shape[1:3] for b in own] == [(64, 128)] * 3 + [
            (128, 64)
        ]
        ids = np.concatenate([b["image_id"] for b in own])
        assert ids[ids >= 0].tolist() == part.image_ids


def test_without_grouping_one_canvas_holds_every_image(config):
    single = config.copy_and_resolve_references()
    single.data.group_orientations = False
    single.data.image_size = (128, 128)
    batches = list(eval_split.eval_split(single).batches())
    assert _ids(batches) == [[1, 2], [3, 4], [5, 6], [7, -1]]
    assert {b["image"].shape[1:3] for b in batches} == {(128, 128)}
