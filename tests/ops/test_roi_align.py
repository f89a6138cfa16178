"""ops/roi_align.py against a direct numpy ROIAlign (values and gradients).

The reference follows the aligned ROIAlign loop of detectron2 / torchvision
literally (sample by sample, with their border rules) and writes the result
as a dense matrix W (one row per output bin, one column per map pixel), so
out = W @ features and d(sum(out * g)) / d features = W^T @ g.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ops import roi_align


def _reference_matrix(box, height, width, output_size, ratio):
    """W f64[P * P, H * W] of one box on one H x W map (aligned ROIAlign)."""
    x1, y1, x2, y2 = (float(v) - 0.5 for v in box)
    bin_w, bin_h = (x2 - x1) / output_size, (y2 - y1) / output_size
    matrix = np.zeros((output_size * output_size, height * width))
    for ph in range(output_size):
        for pw in range(output_size):
            row = ph * output_size + pw
            for iy in range(ratio):
                for ix in range(ratio):
                    y = y1 + ph * bin_h + (iy + 0.5) * bin_h / ratio
                    x = x1 + pw * bin_w + (ix + 0.5) * bin_w / ratio
                    if y < -1.0 or y > height or x < -1.0 or x > width:
                        continue
                    y, x = max(y, 0.0), max(x, 0.0)
                    y_low, x_low = int(y), int(x)
                    if y_low >= height - 1:
                        y_low = y_high = height - 1
                        y = float(y_low)
                    else:
                        y_high = y_low + 1
                    if x_low >= width - 1:
                        x_low = x_high = width - 1
                        x = float(x_low)
                    else:
                        x_high = x_low + 1
                    ly, lx = y - y_low, x - x_low
                    for yy, wy in ((y_low, 1 - ly), (y_high, ly)):
                        for xx, wx in ((x_low, 1 - lx), (x_high, lx)):
                            matrix[row, yy * width + xx] += wy * wx / ratio**2
    return matrix


def _random_boxes(rng, count, extent):
    xy = rng.uniform(-0.2 * extent, 0.9 * extent, (count, 2))
    wh = rng.uniform(0.05 * extent, 0.7 * extent, (count, 2))
    return np.concatenate([xy, xy + wh], -1).astype(np.float32)


# The level rule of the multilevel tests: side 32 on level 3.
CANONICAL_SIZE, CANONICAL_LEVEL = 32.0, 3


def _multilevel(pyramid, boxes, implementation):
    """features -> multilevel ROIAlign of `boxes` (3 x 3 bins, 2 samples)."""

    @jax.jit
    def pooled(features):
        return roi_align.multilevel_roi_align(
            pyramid._replace(features=features),
            jnp.asarray(boxes),
            output_size=3,
            sampling_ratio=2,
            canonical_size=CANONICAL_SIZE,
            canonical_level=CANONICAL_LEVEL,
            implementation=implementation,
        )

    return pooled


def _reference_level(box, min_level):
    """The level of box (f64[4]) by the FPN rule, within min_level..4."""
    side = np.sqrt((box[2] - box[0]) * (box[3] - box[1]))
    level = np.floor(CANONICAL_LEVEL + np.log2(side / CANONICAL_SIZE))
    return int(np.clip(level, min_level, 4))


def _random_levels(rng, image, channels, min_level):
    """f32[2, image / 2**l, image / 2**l, channels] for l in min_level..4."""
    return [
        rng.normal(
            size=(2, image // 2**level, image // 2**level, channels)
        ).astype(np.float32)
        for level in range(min_level, 5)
    ]


@pytest.mark.parametrize("implementation", sorted(roi_align.IMPLEMENTATIONS))
def test_single_map_values_and_gradients_match_reference(implementation):
    rng = np.random.default_rng(0)
    height, width, channels, size, ratio = 9, 12, 3, 4, 2
    features = rng.normal(size=(2, height * width, channels)).astype(np.float32)
    boxes = _random_boxes(rng, 10, 12.0).reshape(2, 5, 4)
    boxes[0, 0] = [-20.0, -20.0, -15.0, -12.0]  # entirely outside: zeros
    boxes[1, 0] = [3.3, 4.1, 3.6, 4.2]  # smaller than a pixel
    zeros = np.zeros((2, 5), np.int32)
    heights, widths = zeros + height, zeros + width

    @jax.jit
    def pooled(f):
        return roi_align.roi_align(
            f,
            jnp.asarray(boxes),
            jnp.asarray(zeros),
            jnp.asarray(heights),
            jnp.asarray(widths),
            output_size=size,
            sampling_ratio=ratio,
            implementation=implementation,
        )

    out = np.asarray(pooled(jnp.asarray(features)))
    cotangent = rng.normal(size=out.shape).astype(np.float32)
    grad = np.asarray(
        jax.jit(jax.grad(lambda f: jnp.sum(pooled(f) * cotangent)))(
            jnp.asarray(features)
        )
    )
    for b in range(2):
        expected_grad = np.zeros((height * width, channels))
        for r in range(5):
            matrix = _reference_matrix(boxes[b, r], height, width, size, ratio)
            expected = (matrix @ features[b]).reshape(size, size, channels)
            np.testing.assert_allclose(
                out[b, r], expected, rtol=1e-5, atol=1e-5
            )
            expected_grad += matrix.T @ cotangent[b, r].reshape(-1, channels)
        np.testing.assert_allclose(grad[b], expected_grad, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[0, 0], 0.0)


@pytest.mark.parametrize("implementation", sorted(roi_align.IMPLEMENTATIONS))
def test_multilevel_reads_each_roi_from_its_level(implementation):
    rng = np.random.default_rng(1)
    image, channels, min_level = 64, 2, 2
    levels = _random_levels(rng, image, channels, min_level)
    boxes = _random_boxes(rng, 12, float(image)).reshape(2, 6, 4)
    boxes[0, 0] = [0.0, 0.0, 64.0, 64.0]  # large: clipped to the top level
    boxes[0, 1] = [10.0, 10.0, 12.0, 12.0]  # tiny: clipped to min_level
    boxes[1, 0] = [5.0, 9.0, 45.0, 49.0]  # side 40: level 3
    pyramid = roi_align.flatten_pyramid(
        [jnp.asarray(x) for x in levels], min_level
    )
    pooled = _multilevel(pyramid, boxes, implementation)
    out = np.asarray(pooled(pyramid.features))
    cotangent = rng.normal(size=out.shape).astype(np.float32)
    grad = np.asarray(
        jax.jit(jax.grad(lambda f: jnp.sum(pooled(f) * cotangent)))(
            pyramid.features
        )
    )
    expected_grads = [np.zeros_like(x) for x in levels]
    seen_levels = set()
    for b in range(2):
        for r in range(6):
            box = boxes[b, r].astype(np.float64)
            level = _reference_level(box, min_level)
            seen_levels.add(level)
            stride = 2**level
            feature = levels[level - min_level][b]
            h, w = feature.shape[:2]
            matrix = _reference_matrix(box / stride, h, w, 3, 2)
            expected = matrix @ feature.reshape(-1, channels)
            np.testing.assert_allclose(
                out[b, r].reshape(-1, channels), expected, rtol=1e-5, atol=1e-5
            )
            expected_grads[level - min_level][b] += (
                matrix.T @ cotangent[b, r].reshape(-1, channels)
            ).reshape(h, w, channels)
    assert seen_levels == {2, 3, 4}
    flat_expected = np.concatenate(
        [g.reshape(2, -1, channels) for g in expected_grads], axis=1
    )
    np.testing.assert_allclose(grad, flat_expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("implementation", sorted(roi_align.IMPLEMENTATIONS))
def test_extents_sample_as_a_map_of_the_image_alone(implementation):
    """With a pyramid's extents, a roi reaching its image's edge clamps to
    the image's last cell (the reference on the cropped map) and never
    reads the canvas past it (values or gradients)."""
    rng = np.random.default_rng(2)
    channels, min_level = 2, 2
    levels = _random_levels(rng, 64, channels, min_level)
    extents = np.array([[48, 40], [64, 20]], np.int32)  # 20: not whole cells
    boxes = np.array(
        [
            [[30.0, 20.0, 40.0, 48.0], [2.0, 3.0, 39.5, 47.0]],
            [[1.0, 40.0, 20.0, 64.0], [10.0, 50.0, 19.0, 60.0]],
        ],
        np.float32,
    )
    pyramid = roi_align.flatten_pyramid(
        [jnp.asarray(x) for x in levels], min_level, jnp.asarray(extents)
    )
    pooled = _multilevel(pyramid, boxes, implementation)
    out = np.asarray(pooled(pyramid.features))
    grad = np.asarray(
        jax.jit(jax.grad(lambda f: jnp.sum(pooled(f))))(pyramid.features)
    )
    outside = [np.ones(x.shape[:3], bool) for x in levels]
    for b in range(2):
        for r in range(2):
            box = boxes[b, r].astype(np.float64)
            level = _reference_level(box, min_level)
            stride = 2**level
            h, w = -(-extents[b] // stride)
            feature = levels[level - min_level][b, :h, :w]
            matrix = _reference_matrix(box / stride, h, w, 3, 2)
            expected = matrix @ feature.reshape(-1, channels)
            np.testing.assert_allclose(
                out[b, r].reshape(-1, channels), expected, rtol=1e-5, atol=1e-5
            )
            outside[level - min_level][b, :h, :w] = False
    outside = np.concatenate([o.reshape(2, -1) for o in outside], axis=1)
    np.testing.assert_array_equal(grad[outside], 0.0)


@pytest.mark.parametrize("implementation", sorted(roi_align.IMPLEMENTATIONS))
def test_not_aligned_is_aligned_shifted_by_half_a_pixel(implementation):
    """aligned=False (torchvision's v1) samples box + 0.5 of aligned=True,
    and stretches boxes under a pixel to one pixel."""
    rng = np.random.default_rng(1)
    height, width, channels = 9, 12, 3
    features = jnp.asarray(
        rng.normal(size=(1, height * width, channels)).astype(np.float32)
    )
    boxes = np.array([[[1.2, 2.5, 7.9, 6.1], [0.0, 0.0, 12.0, 9.0]]])
    index = jnp.zeros((1, 2), jnp.int32)

    def pooled(b, aligned):
        return roi_align.roi_align(
            features,
            jnp.asarray(b, jnp.float32),
            index,
            index + height,
            index + width,
            output_size=3,
            sampling_ratio=2,
            implementation=implementation,
            aligned=aligned,
        )

    np.testing.assert_allclose(
        pooled(boxes, False), pooled(boxes + 0.5, True), rtol=1e-5, atol=1e-6
    )
    tiny = np.array([[[3.0, 4.0, 3.2, 4.1], [3.0, 4.0, 4.0, 5.0]]])
    out = np.asarray(pooled(tiny, False))
    np.testing.assert_allclose(out[0, 0], out[0, 1], rtol=1e-6)


def test_level_eps_is_added_before_the_floor():
    box = jnp.array([[0.0, 0.0, 111.99, 111.99]])  # just under level 3
    assert int(roi_align.roi_levels(box, 2, 5, 224.0, 4)[0]) == 2
    assert int(roi_align.roi_levels(box, 2, 5, 224.0, 4, 1e-3)[0]) == 3


@pytest.mark.parametrize(
    "side, level",
    [(224.0, 4), (223.0, 3), (448.0, 5), (112.0, 3), (16.0, 2), (4000.0, 5)],
)
def test_roi_levels_follow_the_fpn_rule(side, level):
    box = jnp.array([[10.0, 10.0, 10.0 + side, 10.0 + side]])
    levels = jax.jit(roi_align.roi_levels, static_argnums=(1, 2, 3, 4))
    assert int(levels(box, 2, 5, 224.0, 4)[0]) == level


@pytest.mark.parametrize("implementation", sorted(roi_align.IMPLEMENTATIONS))
def test_bfloat16_features_keep_their_dtype(implementation):
    features = jnp.ones((1, 16, 4), jnp.bfloat16)
    box = jnp.array([[[0.5, 0.5, 3.0, 3.5]]])
    one = jnp.zeros((1, 1), jnp.int32)
    out = jax.jit(
        roi_align.roi_align,
        static_argnames=("output_size", "sampling_ratio", "implementation"),
    )(
        features,
        box,
        one,
        one + 4,
        one + 4,
        output_size=2,
        sampling_ratio=2,
        implementation=implementation,
    )
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), 1.0)


def test_bfloat16_gradient_accumulates_in_float32():
    """4096 contributions of 2**-12 to one pixel sum to 1 (bf16 stalls)."""
    features = jnp.zeros((1, 4, 1), jnp.bfloat16)
    index = jnp.zeros((1, 4096), jnp.int32)
    grad = jax.grad(
        lambda f: jnp.sum(
            roi_align.take_rows(f, index).astype(jnp.float32) * 2.0**-12
        )
    )(features)
    assert grad.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(grad, np.float32)[0, :, 0], [1.0, 0.0, 0.0, 0.0]
    )


def test_unknown_implementation_is_one_clear_error():
    with pytest.raises(
        ValueError,
        match=r"^implementation='dense': unknown ROIAlign implementation; "
        r"known: auto, gather, matmul$",
    ):
        roi_align.resolve_implementation("dense")
    with pytest.raises(ValueError, match=r"^config\.model\.roi\.x='dense'"):
        roi_align.check_implementation("dense", "config.model.roi.x")
    roi_align.check_implementation("auto", "config.model.roi.x")
