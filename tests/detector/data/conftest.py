"""Fixtures of the data tests."""

import pytest


@pytest.fixture(name="shapes_root", scope="session")
def shapes_root_fixture(tmp_path_factory) -> str:
    """A folder to hold a small shapes set (written by the pipeline)."""
    return str(tmp_path_factory.mktemp("shapes"))
