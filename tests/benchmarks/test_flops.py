"""benchmarks/flops.py: conv and matmul FLOPs from shapes, gradients too."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks import flops


def _conv(x, w, stride):
    return jax.lax.conv_general_dilated(
        x,
        w,
        (stride, stride),
        "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_forward_and_its_gradient_count_the_real_macs(stride):
    x = jnp.ones((2, 16, 16, 8))
    w = jnp.ones((3, 3, 8, 32))
    out_pixels = 2 * (16 // stride) ** 2
    forward = 2.0 * out_pixels * 32 * 8 * 9
    assert flops.count_flops(lambda a, b: _conv(a, b, stride), x, w) == {
        "conv": forward,
        "dot": 0.0,
        "total": forward,
    }
    # Backward: the input and the weight gradient each cost one forward.
    grad = jax.grad(lambda a, b: _conv(a, b, stride).sum(), argnums=(0, 1))
    assert flops.count_flops(grad, x, w)["conv"] == 3 * forward


def test_matmuls_inside_jit_and_scan_are_counted_per_iteration():
    a, b = jnp.ones((4, 5, 6)), jnp.ones((6, 7))

    @jax.jit
    def body(carry, x):
        return carry + jnp.einsum("ij,jk->ik", x, b).sum(), None

    counted = flops.count_flops(lambda xs: jax.lax.scan(body, 0.0, xs)[0], a)
    assert counted["dot"] == 4 * 2.0 * 5 * 7 * 6


def test_peak_is_known_only_for_listed_devices():
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.0
    assert flops.peak_tflops("cpu", "float32") is None
