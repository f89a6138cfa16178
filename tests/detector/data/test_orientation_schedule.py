"""data/orientation_schedule.py: step -> orientation and images, pure
functions of (seed, step) in the dataset's proportions."""

import collections

import numpy as np
import pytest

from detector.data import orientation_schedule as schedule_lib

COUNTS = (70, 30)  # landscape, portrait images
BATCH = 8


def _images(counts):
    """Image indices of each orientation, interleaved as in a folder."""
    kinds = np.repeat(np.arange(len(counts)), counts)
    np.random.default_rng(0).shuffle(kinds)
    return [np.flatnonzero(kinds == k).tolist() for k in range(len(counts))]


def _visits(seed, counts, steps):
    schedule = schedule_lib.OrientationSchedule(seed, counts, BATCH)
    records = schedule_lib.OrientationRecords(seed, _images(counts))
    seen = collections.Counter()
    for step in range(steps):
        _, _, images = schedule_lib.step_rows(
            schedule, records, step, range(BATCH), BATCH
        )
        seen.update(images.tolist())
    return schedule, seen


def test_a_steps_orientation_depends_only_on_seed_and_step():
    one = schedule_lib.OrientationSchedule(3, COUNTS, BATCH)
    late = schedule_lib.OrientationSchedule(3, COUNTS, BATCH)
    for step in (250, 40, 7):  # asked in another order, from a fresh one
        late.orientation(step)
    steps = range(0, 300)
    assert [one.orientation(s) for s in steps] == [
        late.orientation(s) for s in steps
    ]
    other = schedule_lib.OrientationSchedule(4, COUNTS, BATCH)
    assert [one.orientation(s) for s in steps] != [
        other.orientation(s) for s in steps
    ]


def test_steps_follow_the_datasets_proportions():
    schedule = schedule_lib.OrientationSchedule(0, COUNTS, BATCH)
    steps = 120 * schedule.steps_per_epoch
    portrait = sum(schedule.orientation(s) for s in range(steps))
    assert portrait / steps == pytest.approx(0.3, abs=0.01)
    assert schedule.steps_before(steps) == (steps - portrait, portrait)


def test_ordinals_count_the_earlier_steps_of_the_same_orientation():
    schedule = schedule_lib.OrientationSchedule(1, COUNTS, BATCH)
    counts = [0, 0]
    for step in range(5 * schedule.steps_per_epoch + 3):
        kind = schedule.orientation(step)
        assert schedule.ordinal(step) == counts[kind]
        assert schedule.steps_before(step) == tuple(counts)
        counts[kind] += 1


def test_every_image_about_once_per_epoch():
    epochs = 10
    schedule, seen = _visits(5, COUNTS, 0)
    steps = epochs * schedule.steps_per_epoch
    _, seen = _visits(5, COUNTS, steps)
    assert len(seen) == sum(COUNTS)  # no image is left out
    # An epoch's steps ask for about n_o images of orientation o: each
    # image is read epochs +- 1 times.
    assert epochs - 1 <= min(seen.values())
    assert max(seen.values()) <= epochs + 1


def test_one_orientation_takes_every_step():
    schedule, seen = _visits(0, (12, 0), 6)
    assert {schedule.orientation(s) for s in range(6)} == {0}
    assert max(seen.values()) - min(seen.values()) <= 1


def test_rows_of_a_step_split_across_processes_as_one():
    schedule = schedule_lib.OrientationSchedule(2, COUNTS, BATCH)
    records = schedule_lib.OrientationRecords(2, _images(COUNTS))
    for step in (0, 9, 31):
        whole = schedule_lib.step_rows(
            schedule, records, step, range(BATCH), BATCH
        )
        halves = [
            schedule_lib.step_rows(
                schedule, records, step, range(p * 4, p * 4 + 4), BATCH
            )
            for p in range(2)
        ]
        assert {h[0] for h in halves} == {whole[0]}
        np.testing.assert_array_equal(
            np.concatenate([h[2] for h in halves]), whole[2]
        )
        np.testing.assert_array_equal(
            np.concatenate([h[1] for h in halves]),
            step * BATCH + np.arange(BATCH),
        )


def test_images_of_a_step_have_its_orientation():
    images = _images(COUNTS)
    schedule = schedule_lib.OrientationSchedule(0, COUNTS, BATCH)
    records = schedule_lib.OrientationRecords(0, images)
    for step in range(40):
        kind, _, picked = schedule_lib.step_rows(
            schedule, records, step, range(BATCH), BATCH
        )
        assert set(picked.tolist()) <= set(images[kind])


@pytest.mark.parametrize(
    ("counts", "batch", "message"),
    [((0, 0), 8, "need at least one image"), ((5, 5), 0, "global_batch")],
)
def test_bad_arguments_are_one_line(counts, batch, message):
    with pytest.raises(ValueError, match=message):
        schedule_lib.OrientationSchedule(0, counts, batch)
