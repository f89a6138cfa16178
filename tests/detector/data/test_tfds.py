"""The TFDS coco/2017 source, without network, through tfds mock_data."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from detector.data import eval_split, pipeline
from detector.data.sources import tfds as tfds_coco
from tests.detector.data import helpers, tfds_mock


@pytest.fixture(name="tfds_config")
def tfds_config_fixture(tmp_path):
    with tfds.testing.mock_data(as_dataset_fn=tfds_mock.as_dataset_fn()):
        yield tfds_mock.config(str(tmp_path))


def test_train_batches_from_tfds_and_resume(tfds_config):
    batches = list(itertools.islice(pipeline.train_batches(tfds_config), 3))
    # One step per epoch here: resuming at step 2 opens epoch 2, whose
    # order differs from the epochs before it.
    orders = [b["image_id"].tolist() for b in batches]
    assert orders[2] not in orders[:2], orders
    resumed = next(pipeline.train_batches(tfds_config, start_step=2))
    _assert_same_batch(resumed, batches[2])
    first = batches[0]
    assert first["image"].shape == (4, 64, 80, 3)
    assert first["masks"].shape == (4, 4, 16, 16)
    for batch in batches:
        # TFDS coco has no segmentations: no mask targets at all.
        assert not batch["mask_valid"].any() and not batch["masks"].any()
    # Without augmentation each image's boxes are its pixel boxes * scale;
    # crowd and zero-size boxes are gone.
    for batch in batches:
        for row, image_id in enumerate(batch["image_id"]):
            height, width, objects = tfds_mock.EXAMPLES[image_id - 101]
            kept = [
                o
                for o in objects
                if not o[2] and o[0][2] > o[0][0] and o[0][3] > o[0][1]
            ]
            valid = batch["valid"][row]
            assert valid.sum() == len(kept)
            scale = min(64 / height, 80 / width)
            assert np.isclose(batch["scale"][row], scale)
            assert batch["orig_size"][row].tolist() == [height, width]
            expected = [
                [
                    o[0][1] * width,
                    o[0][0] * height,
                    o[0][3] * width,
                    o[0][2] * height,
                ]
                for o in kept
            ]
            resized = np.round(np.array([height, width]) * scale)
            factor = np.tile((resized / [height, width])[::-1], 2)
            np.testing.assert_allclose(
                batch["boxes"][row][valid],
                np.reshape(expected, (-1, 4)) * factor,
                atol=1e-3,
            )
            classes = [o[1] + 1 for o in kept]
            assert batch["classes"][row][valid].tolist() == classes


def _assert_same_batch(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in got:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_each_of_two_processes_reads_only_its_share_and_resumes(tmp_path):
    """Process p reads records [2p, 2p + 2) of the 4, and nothing else.

    Global batch 4 over 2 processes: one step per epoch of each 2-record
    share. Resuming either process at step 2 gives the batch of step 2.
    """
    reads = []
    mocked = tfds_mock.as_dataset_fn(reads=reads)
    with tfds.testing.mock_data(as_dataset_fn=mocked):
        config = tfds_mock.config(str(tmp_path))
        runs, seen = [], []
        for p in range(2):
            reads.clear()
            batches = pipeline.train_batches(
                config, process_index=p, process_count=2
            )
            run = list(itertools.islice(batches, 3))
            runs.append(run)
            assert set(reads) == {("train", 2 * p, 2 * p + 2)}, reads
            seen.append({i for b in run for i in b["image_id"].tolist()})
            reads.clear()
            resumed = next(
                pipeline.train_batches(
                    config, start_step=2, process_index=p, process_count=2
                )
            )
            assert set(reads) == {("train", 2 * p, 2 * p + 2)}, reads
            _assert_same_batch(resumed, run[2])
    assert seen == [{101, 102}, {103, 104}]
    for run in runs:
        assert all(b["image"].shape == (2, 64, 80, 3) for b in run)
        # The share is reshuffled each epoch (seeded): 2 records, 3 epochs.
        assert len({tuple(b["image_id"].tolist()) for b in run}) == 2


def test_eval_split_from_tfds(tfds_config):
    split = eval_split.eval_split(tfds_config)
    assert not split.has_masks
    assert split.image_ids == [201, 202, 203, 204]
    assert split.category_ids == list(tfds_coco.COCO_2017_CATEGORY_IDS)
    gt = split.coco
    assert sorted(gt.imgs) == [201, 202, 203, 204]
    assert gt.imgs[202]["height"] == 50 and gt.imgs[202]["width"] == 30
    anns = list(gt.anns.values())
    # Crowd regions stay in the ground truth; the zero-size box does not.
    assert sum(a["iscrowd"] for a in anns) == 1
    assert len(anns) == 5
    labels = sorted(a["category_id"] for a in anns)
    assert labels == [1, 1, 3, 6, 90]  # labels 0, 0, 2, 5, 79
    first = next(
        a
        for a in anns
        if a["image_id"] == 201 and not a["iscrowd"] and a["category_id"] == 1
    )
    np.testing.assert_allclose(first["bbox"], [6, 4, 18, 16], atol=1e-4)
    batches = list(split.batches())
    assert len(batches) == split.num_batches == 2
    ids = np.concatenate([b["image_id"] for b in batches]).tolist()
    assert ids == [201, 202, 203, 204]
    assert batches[0]["orig_size"].tolist() == [[40, 60], [50, 30]]


def test_grouped_eval_reads_each_orientation_in_order(tfds_config):
    config = tfds_config
    config.data.resize = "shortest_edge"
    config.data.min_size, config.data.max_size = (32,), 64
    config.data.group_orientations = True
    split = eval_split.eval_split(config)
    # 201 is 40 x 60, 202 50 x 30, 203 square (landscape), 204 60 x 40.
    assert split.image_ids == [201, 203, 202, 204]
    batches = list(split.batches())
    assert [b["image_id"].tolist() for b in batches] == [
        [201, 203],
        [202, 204],
    ]
    assert [b["image"].shape[1:3] for b in batches] == [(64, 80), (80, 64)]
    source = tfds_coco.TfdsSource(config, "validation")
    with pytest.raises(ValueError, match="must be ascending and distinct"):
        source.eval_images([2, 0])


def test_tfds_config_errors(tfds_config):
    tfds_config.data.num_classes = 3
    with pytest.raises(ValueError, match="80 labels but data.num_classes"):
        eval_split.eval_split(tfds_config)


def test_tfds_not_prepared_is_a_clear_error(tmp_path):
    config = helpers.small_config("", source="tfds")
    config.data.tfds_data_dir = str(tmp_path)
    config.data.num_classes = 80
    with pytest.raises(FileNotFoundError, match="is not prepared there"):
        eval_split.eval_split(config, "validation")


def test_eval_split_slices_like_tfds(tfds_config):
    """Slices pick the leading / trailing records of the named split only."""
    first_two = eval_split.eval_split(tfds_config, "validation[:2]")
    assert first_two.image_ids == [201, 202]
    assert sorted(first_two.coco.imgs) == [201, 202]
    ids = [int(i) for b in first_two.batches() for i in b["image_id"]]
    assert ids == [201, 202]
    assert eval_split.eval_split(tfds_config, "validation[1:3]").image_ids == [
        202,
        203,
    ]
    assert eval_split.eval_split(tfds_config, "validation[-1:]").image_ids == [
        204
    ]
    assert eval_split.eval_split(tfds_config, "validation[50%:]").image_ids == [
        203,
        204,
    ]
    assert eval_split.eval_split(tfds_config, "train[:1]").image_ids == [101]
    # As in TFDS, a slice past the end of the split is an error.
    with pytest.raises(
        ValueError,
        match=r"split 'validation\[:10\]' of tfds "
        r"coco/2017: .*\[:10\] incompatible with 4 examples",
    ):
        eval_split.eval_split(tfds_config, "validation[:10]")


def test_corrupt_image_names_the_record(tmp_path):
    config = tfds_mock.config(str(tmp_path))
    expected = (
        r"^tfds coco/2017 record image/filename=2.jpg \(image/id="
        r"{}\): cannot decode its image: "
        rf"{len(tfds_mock.CORRUPT_BYTES)} bytes in no known format \(JPEG, "
    )
    mocked = tfds_mock.as_dataset_fn(corrupt=2)
    with tfds.testing.mock_data(as_dataset_fn=mocked):
        with pytest.raises(ValueError, match=expected.format(203)):
            eval_split.eval_split(config)
        with pytest.raises(ValueError, match=expected.format(103)):
            next(pipeline.train_batches(config))
        # Records before the corrupt one still load.
        assert eval_split.eval_split(config, "validation[:2]").image_ids == [
            201,
            202,
        ]


class CocoWithoutLabels(tfds.core.GeneratorBasedBuilder):
    """A COCO-like builder whose objects carry no 'label' feature."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(),
                    "image/filename": tfds.features.Text(),
                    "image/id": tf.int64,
                    "objects": tfds.features.Sequence(
                        {
                            "bbox": tfds.features.BBoxFeature(),
                            "is_crowd": tf.bool,
                            "area": tf.int64,
                        }
                    ),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {"validation": self._generate_examples()}

    def _generate_examples(self):
        yield from ()


def test_features_without_labels_name_the_builder_and_key(tmp_path):
    config = tfds_mock.config(str(tmp_path))
    config.data.tfds_name = "coco_without_labels"
    with (
        tfds.testing.mock_data(as_dataset_fn=tfds_mock.as_dataset_fn()),
        pytest.raises(
            ValueError,
            match=r"^tfds coco_without_labels: "
            r"features lack 'objects/label' \(the source "
            r"reads image, image/id, objects/bbox",
        ),
    ):
        eval_split.eval_split(config)
