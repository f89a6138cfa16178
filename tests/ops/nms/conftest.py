"""Fixtures of the NMS tests."""

import pytest

from tests.ops.nms.helpers import backend_params


@pytest.fixture(params=backend_params())
def backend(request) -> str:
    return request.param


# What ops/nms wraps around every kernel (batch dimensions, vmap, the
# float32 upcast, the gradient stop) is one code path for the two pallas
# backends: by default it is proven on `pallas`, whose kernel runs faster
# in interpret mode, and on pallas_mosaic_gpu in the slow stage.
@pytest.fixture(params=backend_params(slow=("pallas_mosaic_gpu",)))
def wrapper_backend(request) -> str:
    return request.param
