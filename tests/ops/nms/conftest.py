"""Fixtures of the NMS tests."""

import pytest

from tests.ops.nms.helpers import backend_params


@pytest.fixture(params=backend_params())
def backend(request) -> str:
    return request.param
