"""Fixtures of the NMS tests."""

import pytest

from tests.ops.nms.helpers import ALL_BACKENDS


@pytest.fixture(params=ALL_BACKENDS)
def backend(request) -> str:
    return request.param
