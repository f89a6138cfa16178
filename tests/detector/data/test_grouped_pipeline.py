"""Training batches with data.group_orientations: one orientation per step,
the schedule's, on its canvas; exact resume and process split."""

import itertools

import numpy as np
import pytest

from detector.data import orientation_schedule, pipeline
from detector.data.sources import coco_json
from detector.imaging import canvases
from tests.helpers import mixed_orientations

NUM_IMAGES = 12  # 8 landscape, 4 portrait; 3 steps of 4 per epoch
STEPS = 7


@pytest.fixture(name="grouped", scope="module")
def grouped_fixture(tmp_path_factory):
    """(config, portrait flag of each image id) of the mixed folder."""
    root = tmp_path_factory.mktemp("mixed")
    portrait = mixed_orientations.write(root, "train", NUM_IMAGES)
    config = mixed_orientations.grouped_config(root)
    config.data.train_split = "train"
    return config, {i + 1: tall for i, tall in enumerate(portrait)}


@pytest.fixture(name="from_zero", scope="module")
def from_zero_fixture(grouped):
    config, _ = grouped
    return list(itertools.islice(pipeline.train_batches(config), STEPS))


def _schedule(config):
    return orientation_schedule.OrientationSchedule(
        config.seed, (8, 4), config.train.batch_size
    )


def _assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert set(a) == set(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_source_counts_each_orientation(grouped):
    config, portrait = grouped
    source = coco_json.CocoJsonSource(config, "train")
    tall = sum(portrait.values())
    assert source.orientation_counts() == (NUM_IMAGES - tall, tall) == (8, 4)


def test_each_step_holds_the_schedules_orientation_on_its_canvas(
    grouped, from_zero
):
    config, portrait = grouped
    schedule = _schedule(config)
    kinds = [schedule.orientation(step) for step in range(STEPS)]
    assert set(kinds) == {canvases.LANDSCAPE, canvases.PORTRAIT}
    for kind, batch in zip(kinds, from_zero, strict=True):
        canvas = canvases.canvases(config.data)[kind]
        assert batch["image"].shape == (4, *canvas, 3)
        for image_id, (h, w) in zip(
            batch["image_id"], batch["orig_size"], strict=True
        ):
            assert portrait[int(image_id)] == (kind == canvases.PORTRAIT)
            assert canvases.orientation(int(h), int(w)) == kind
        assert (batch["image_size"] <= canvas).all()
    # Over its steps, each orientation's images come round once per pass.
    seen = [int(i) for b in from_zero[:3] for i in b["image_id"]]
    assert len(seen) == len(set(seen))


def test_a_resume_inside_the_grouping_gives_the_same_batches(
    grouped, from_zero
):
    config, _ = grouped
    for start in (3, 5):
        resumed = pipeline.train_batches(config, start_step=start)
        _assert_same(
            list(itertools.islice(resumed, STEPS - start)), from_zero[start:]
        )


def test_two_processes_split_each_grouped_batch(grouped, from_zero):
    config, _ = grouped
    halves = [
        list(
            itertools.islice(
                pipeline.train_batches(
                    config, start_step=2, process_index=p, process_count=2
                ),
                3,
            )
        )
        for p in range(2)
    ]
    joined = [
        {key: np.concatenate([a[key], b[key]]) for key in a}
        for a, b in zip(*halves, strict=True)
    ]
    _assert_same(joined, from_zero[2:5])


def test_a_split_of_one_orientation_trains_on_its_canvas_only(shapes_root):
    """The shapes set is square (landscape): the portrait stream is empty
    and never read."""
    config = mixed_orientations.grouped_config(shapes_root)
    config.data.source = "shapes"
    source = pipeline.SOURCES["shapes"](config, "train")
    assert source.orientation_counts() == (12, 0)
    landscape = canvases.canvases(config.data)[canvases.LANDSCAPE]
    batches = pipeline.train_batches(config)
    assert batches.canvases == (landscape,)  # the programs to compile
    for batch in itertools.islice(batches, 4):
        assert batch["image"].shape == (4, *landscape, 3)


def test_a_split_of_both_orientations_uses_both_canvases(grouped):
    config, _ = grouped
    batches = pipeline.train_batches(config)
    assert batches.canvases == canvases.canvases(config.data)
