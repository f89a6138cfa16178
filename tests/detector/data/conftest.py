"""Fixtures of the data tests."""

import pytest

# The data modules read with TensorFlow, TFDS and pycocotools; where they are
# not installed (GPU images often lack them) every data test is skipped.
pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_datasets")
pytest.importorskip("pycocotools.mask")


@pytest.fixture(name="shapes_root", scope="session")
def shapes_root_fixture(tmp_path_factory) -> str:
    """A folder to hold a small shapes set (written by the pipeline)."""
    return str(tmp_path_factory.mktemp("shapes"))
