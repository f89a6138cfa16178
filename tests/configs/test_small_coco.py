"""configs/small_coco.py: the shapes recipe's CPU-sized model on your own
COCO folder, data.num_classes from its annotation file."""

import pytest

from configs import shapes, small_coco
from detector.launch import data_check
from detector.launch.validate import validate
from tests.detector.data import helpers


@pytest.fixture(name="folder")
def folder_fixture(tmp_path):
    for split, n in (("train", 4), ("val", 2)):
        helpers.write_colour_coded(str(tmp_path), split, n, 48, 60)
    return tmp_path


def test_it_takes_num_classes_from_the_folder_and_validates(folder):
    config = small_coco.get_config()
    assert config.model == shapes.get_config().model
    assert config.data.num_classes == 0
    config.data.root = str(folder)
    data_check.check(config)
    assert config.data.num_classes == 3  # the colour-coded set's
    validate(config)


def test_the_roboflow_variant_reads_valid(folder):
    config = small_coco.get_config("runlocal,roboflow")
    assert config.data.eval_split == "valid[:8]"
    config.data.root = str(folder)
    with pytest.raises(FileNotFoundError, match=r"splits there: train, val;"):
        data_check.check(config)
