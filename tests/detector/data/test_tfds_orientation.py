"""The TFDS source's orientation index and grouped training records."""

import io
import pathlib
import threading

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from detector.data.orientation_schedule import OrientationSchedule
from detector.data.sources import orientation_index_file as index_file
from detector.data.sources import tfds as tfds_coco
from detector.imaging import canvases, orientation
from tests.detector.data import tfds_mock

# Orientation of the mocked train images 101..104 (40x60, 50x30, a square,
# 60x40).
KINDS = {101: 0, 102: 1, 103: 0, 104: 1}


@pytest.fixture(name="data_dir")
def data_dir_fixture(tmp_path, monkeypatch) -> pathlib.Path:
    """The builder's data folder and the cache folder, both under tmp_path;
    counts the image-header reads in `header_reads`."""
    folder = tmp_path / "coco" / "2017"
    folder.mkdir(parents=True)
    monkeypatch.setattr(tfds_coco.TfdsCoco, "data_dir", str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return folder


@pytest.fixture(name="header_reads")
def header_reads_fixture(monkeypatch) -> list:
    reads = []
    header = tfds_coco._header

    def counted(record, name):
        reads.append(name)
        return header(record, name)

    monkeypatch.setattr(tfds_coco, "_header", counted)
    return reads


@pytest.fixture(name="mocked")
def mocked_fixture():
    with tfds.testing.mock_data(as_dataset_fn=tfds_mock.as_dataset_fn()):
        yield


def _source(tmp_path, split: str = "train") -> tfds_coco.TfdsSource:
    config = tfds_mock.config(str(tmp_path))
    return tfds_coco.TfdsSource(config, split)


def test_index_is_built_once_and_counts_the_images(
    tmp_path, data_dir, header_reads, mocked
):
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert len(header_reads) == 1
    assert [p.name for p in data_dir.iterdir()] == [
        "orientation_index.train.npz"
    ]
    # A second start reads the file, no image header; a slice reuses it.
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert _source(tmp_path, "train[1:]").orientation_counts() == (1, 2)
    assert len(header_reads) == 1


@pytest.mark.parametrize("damage", ["unreadable", "stale"])
def test_a_damaged_or_stale_index_is_rebuilt(
    tmp_path, data_dir, header_reads, mocked, damage, caplog
):
    _source(tmp_path).orientation_counts()
    path = data_dir / "orientation_index.train.npz"
    if damage == "unreadable":
        path.write_bytes(b"not an npz")
    else:  # made when the split held 3 records
        with np.load(path) as stored:
            meta = str(stored["meta"]).replace('"records": 4', '"records": 3')
            np.savez(path, records=stored["records"][:3], meta=np.array(meta))
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert len(header_reads) == 2
    assert f"{path}: {damage}" in caplog.text
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert len(header_reads) == 2


def test_a_read_only_data_folder_keeps_the_index_in_the_cache(
    tmp_path, data_dir, header_reads, mocked, monkeypatch
):
    write = index_file.files.write_bytes

    def read_only(path, data):
        if pathlib.Path(path).parent == data_dir:
            raise PermissionError(13, "Permission denied")
        write(path, data)

    monkeypatch.setattr(index_file.files, "write_bytes", read_only)
    _source(tmp_path).orientation_counts()
    assert not list(data_dir.iterdir())
    (cached,) = (tmp_path / "cache").rglob("orientation_index.train.npz")
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert len(header_reads) == 1
    assert cached.exists()


def test_a_remote_data_folder_holds_the_index(
    tmp_path, header_reads, mocked, monkeypatch
):
    """As on gs://: TensorFlow's in-memory file system stands in for it."""
    folder = f"ram://{tmp_path.name}/coco/2017"
    monkeypatch.setattr(tfds_coco.TfdsCoco, "data_dir", folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _source(tmp_path).orientation_counts()
    assert tf.io.gfile.exists(f"{folder}/orientation_index.train.npz")
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert len(header_reads) == 1
    assert not (tmp_path / "cache").exists()


def test_only_process_0_writes_the_index(
    tmp_path, data_dir, header_reads, mocked, monkeypatch
):
    monkeypatch.setattr(tfds_coco.jax, "process_index", lambda: 1)
    assert _source(tmp_path).orientation_counts() == (2, 2)
    assert not list(tmp_path.rglob("*.npz"))


def test_the_orientation_is_that_of_the_turned_image(tmp_path, data_dir):
    """A landscape JPEG whose EXIF orientation turns it counts as portrait."""
    out = io.BytesIO()
    exif = Image.Exif()
    exif[orientation.ORIENTATION_TAG] = 6
    Image.new("RGB", (40, 24)).save(out, "JPEG", exif=exif)
    record = next(iter(tfds_mock.mock_records(True, 101)))
    record["image"] = tf.constant(out.getvalue())

    def as_dataset(self, split, **kwargs):
        del self, split, kwargs
        return tf.data.Dataset.from_tensors(record)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        assert _source(tmp_path).orientation_counts() == (0, 1)


def _rows(datasets, count: int) -> list[list[tuple[int, int]]]:
    """The first `count` (g, image/id) of each dataset."""
    return [
        [(int(g), int(r["image/id"])) for g, r in data.take(count)]
        for data in datasets
    ]


def test_grouped_records_follow_the_schedule(tmp_path, data_dir, mocked):
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, source.orientation_counts(), 2)
    datasets = source.grouped_train_records(schedule, 0, 2, (0, 1))
    for kind, rows in enumerate(_rows(datasets, 6)):
        assert {KINDS[image] for _, image in rows} == {kind}
        # Rows 0 and 1 of each step of the orientation, in step order.
        steps = [g // 2 for g, _ in rows[::2]]
        assert [g for g, _ in rows] == [
            2 * s + j for s in steps for j in (0, 1)
        ]
        assert steps == [
            s for s in range(steps[-1] + 1) if schedule.orientation(s) == kind
        ]


def test_grouped_records_resume_mid_epoch(tmp_path, data_dir, mocked):
    """One row a step: each orientation's epoch (2 images) spans 2 steps."""
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, source.orientation_counts(), 1)
    runs = _rows(source.grouped_train_records(schedule, 0, 1, (0, 1)), 8)
    for kind, rows in enumerate(runs):
        images = {i for i, k in KINDS.items() if k == kind}
        for epoch in range(4):
            assert {i for _, i in rows[2 * epoch : 2 * epoch + 2]} == images
    for start in (1, 2, 5):
        resumed = source.grouped_train_records(schedule, start, 1, (0, 1))
        for run, rows in zip(runs, _rows(resumed, 3), strict=True):
            assert rows == [r for r in run if r[0] >= start][:3]


def test_an_orientation_without_steps_has_an_empty_dataset(
    tmp_path, data_dir, mocked
):
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, (4, 0), 2)
    landscape, portrait = source.grouped_train_records(schedule, 0, 2, (0, 1))
    assert portrait.element_spec == landscape.element_spec
    assert not list(portrait)


def test_two_processes_read_disjoint_rows_of_the_same_steps(
    tmp_path, data_dir, mocked
):
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, source.orientation_counts(), 2)
    runs = [
        _rows(source.grouped_train_records(schedule, 0, 1, (p, 2)), 3)
        for p in range(2)
    ]
    for kind in range(len(canvases.NAMES)):
        first, second = (run[kind] for run in runs)
        assert [g // 2 for g, _ in first] == [g // 2 for g, _ in second]
        assert {g % 2 for g, _ in first} == {0}
        assert {g % 2 for g, _ in second} == {1}
        # Process p reads its share: records 2p and 2p + 1 (101.., 103..).
        assert {i for _, i in first} == {101 + kind}
        assert {i for _, i in second} == {103 + kind}


def test_a_share_without_an_orientation_is_an_error(tmp_path, data_dir, mocked):
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, source.orientation_counts(), 4)
    with pytest.raises(
        ValueError,
        match=r"^split 'train' of tfds coco/2017: the share of process 0 of "
        r"4 holds no portrait image, but the schedule has portrait steps",
    ):
        source.grouped_train_records(schedule, 0, 1, (0, 4))


def test_an_image_missing_from_the_index_names_the_record(
    tmp_path, data_dir, mocked
):
    """Data changed under an index of the same size: one line to fix it."""
    counts = _source(tmp_path).orientation_counts()
    path = data_dir / "orientation_index.train.npz"
    with np.load(path) as stored:
        records, meta = stored["records"].copy(), stored["meta"]
    records[0, 0] = 999
    np.savez(path, records=records, meta=meta)
    source = _source(tmp_path)
    schedule = OrientationSchedule(7, counts, 2)
    landscape, _ = source.grouped_train_records(schedule, 0, 2, (0, 1))
    with pytest.raises(tf.errors.OpError):
        list(landscape.take(2))
    assert str(source.take_error()) == (
        "tfds coco/2017 record image/id=101 is not in the orientation index "
        "of split train: the data changed since it was built; delete its "
        "orientation_index.*.npz to rebuild it"
    )
    assert source.take_error() is None


class TinyCoco(tfds.core.GeneratorBasedBuilder):
    """48 records in 2 files (TFDS interleaves them), every third portrait."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None  # no checksums file to look up beside this module

    def _info(self) -> tfds.core.DatasetInfo:
        objects = {
            "bbox": tfds.features.BBoxFeature(),
            "label": tfds.features.ClassLabel(num_classes=3),
            "is_crowd": tf.bool,
            "area": tf.int64,
        }
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(encoding_format="jpeg"),
                    "image/filename": tfds.features.Text(),
                    "image/id": tf.int64,
                    "objects": tfds.features.Sequence(objects),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(48):
            size = (20, 12) if i % 3 == 0 else (12, 20)
            yield (
                i,
                {
                    "image": np.full((*size, 3), i, np.uint8),
                    "image/filename": f"{i}.jpg",
                    "image/id": 1000 + i,
                    "objects": {
                        "bbox": np.zeros([0, 4], np.float32),
                        "label": [],
                        "is_crowd": [],
                        "area": [],
                    },
                },
            )


def test_a_prepared_builder_shares_records_by_tfds_slices(tmp_path):
    """The index is in the order TFDS' slices count, so a process's share
    of the index holds the records TFDS reads for it."""
    TinyCoco(data_dir=str(tmp_path)).download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=2)
    )
    config = tfds_mock.config(str(tmp_path))
    config.data.tfds_name = "tiny_coco"
    config.data.num_classes = 3
    source = tfds_coco.TfdsSource(config, "train")
    assert source.orientation_counts() == (32, 16)
    assert (tmp_path / "tiny_coco/1.0.0/orientation_index.train.npz").exists()
    schedule = OrientationSchedule(7, (32, 16), 6)
    for p in range(3):
        share = tfds.even_splits("train", n=3, drop_remainder=True)[p]
        ids = {int(r["image/id"]) for r in source.builder.raw(share)}
        datasets = source.grouped_train_records(schedule, 0, 2, (p, 3))
        for kind, dataset in enumerate(datasets):
            # The first epoch of the share's stream of each orientation.
            want = {i for i in ids if ((i - 1000) % 3 == 0) == kind}
            read = [int(r["image/id"]) for _, r in dataset.take(len(want))]
            assert sorted(read) == sorted(want)


def test_grouped_training_batches_through_the_pipeline(
    tmp_path, data_dir, mocked, monkeypatch
):
    from detector.data import pipeline  # noqa: PLC0415

    # The two orientation streams open epochs from tf.data threads at once;
    # the mock's as_dataset swaps a global fake file system in and out
    # around each call, so the calls take turns here.
    lock = threading.Lock()
    raw = tfds_coco.TfdsCoco.raw

    def one_at_a_time(self, *args, **kwargs):
        with lock:
            return raw(self, *args, **kwargs)

    monkeypatch.setattr(tfds_coco.TfdsCoco, "raw", one_at_a_time)

    config = tfds_mock.config(str(tmp_path))
    data = config.data
    data.resize, data.min_size, data.max_size = "shortest_edge", (32,), 64
    data.image_size = (32, 64)
    data.group_orientations = True
    config.train.batch_size = 2
    schedule = OrientationSchedule(config.seed, (2, 2), 2)
    batches = pipeline.train_batches(config)
    firsts = [next(batches) for _ in range(6)]
    for step, batch in enumerate(firsts):
        kind = schedule.orientation(step)
        assert batch["image"].shape[1:3] == canvases.canvases(data)[kind]
        assert {KINDS[int(i)] for i in batch["image_id"]} == {kind}
    resumed = pipeline.train_batches(config, start_step=3)
    for want in firsts[3:]:
        got = next(resumed)
        np.testing.assert_array_equal(got["image_id"], want["image_id"])
        np.testing.assert_array_equal(got["image"], want["image"])
