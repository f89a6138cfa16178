"""detector/modeling/rpn.py: head shapes, on-device targets, proposals."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.modeling import anchors as anchors_lib
from detector.modeling import norms, rpn

_WEIGHTS = (1.0, 1.0, 1.0, 1.0)


def test_head_shapes_per_level():
    head = nnx.eval_shape(
        lambda: rpn.RPNHead(8, 3, dtype=jnp.float32, rngs=nnx.Rngs(0))
    )
    features = [
        jax.ShapeDtypeStruct((2, 16, 16, 8), jnp.float32),
        jax.ShapeDtypeStruct((2, 8, 8, 8), jnp.float32),
    ]
    graphdef, state = nnx.split(head)
    logits, deltas = jax.eval_shape(
        lambda s, f: nnx.merge(graphdef, s)(f), state, features
    )
    assert [x.shape for x in logits] == [(2, 768), (2, 192)]
    assert [x.shape for x in deltas] == [(2, 768, 4), (2, 192, 4)]


def _targets(anchors, gt_boxes, gt_valid, seed, num_samples=16):
    fn = jax.jit(
        functools.partial(
            rpn.rpn_targets,
            anchors,
            sampling=rpn.AnchorSampling(0.7, 0.3, num_samples, 0.5, _WEIGHTS),
        )
    )
    return jax.tree.map(
        np.asarray,
        fn(jnp.asarray(gt_boxes), jnp.asarray(gt_valid), jax.random.key(seed)),
    )


def test_targets_match_anchors_and_skip_padding():
    anchors = anchors_lib.level_anchors((32, 32), 3, 2.0, (1.0,))  # 16 x 16
    gt = np.zeros((2, 2, 4), np.float32)
    gt[0, 0] = anchors[5] + np.array([1.0, 0.0, 1.0, 0.0])  # shifted anchor
    gt[1, 1] = [0.0, 0.0, 30.0, 30.0]  # padding row: must never match
    valid = np.array([[True, False], [False, False]])
    samples = _targets(anchors, gt, valid, 0)
    assert samples.is_valid[1].all()  # all 16 anchors are negatives
    assert 8 <= samples.is_valid[0].sum() < 16  # neighbours are ignored
    positives = samples.indices[0][samples.is_positive[0]]
    assert positives.tolist() == [5]
    np.testing.assert_allclose(
        samples.box_targets[0][samples.is_positive[0]],
        [[1.0 / 16, 0.0, 0.0, 0.0]],
        atol=1e-6,
    )
    assert not samples.is_positive[1].any()  # only padding in image 1


def test_each_image_gets_its_own_key():
    anchors = anchors_lib.level_anchors((64, 64), 3, 2.0, (1.0,))  # 64
    gt = np.zeros((2, 1, 4), np.float32)
    samples = _targets(anchors, gt, np.zeros((2, 1), bool), 3)
    assert set(samples.indices[0]) != set(samples.indices[1])


def _proposals(logits, deltas, anchors, image_size=(32, 32), **kwargs):
    params = dict(
        pre_nms_top_k=4,
        post_nms_top_k=3,
        nms_iou=0.5,
        min_size=0.0,
        weights=_WEIGHTS,
        backend="while_loop",
    )
    params.update(kwargs)
    options = rpn.ProposalOptions(**params)
    fn = jax.jit(
        lambda lg, dl: rpn.generate_proposals(
            lg, dl, anchors, options=options, image_size=image_size
        )
    )
    return fn(logits, deltas)


def test_proposals_clip_suppress_merge_and_mask():
    level0 = np.array(
        [
            [0, 0, 10, 10],
            [1, 0, 11, 10],
            [20, 20, 40, 40],
            [5, 5, 5, 9],
            [0, 20, 8, 28],
        ],
        np.float32,
    )
    level1 = np.array([[8, 8, 24, 24], [16, 0, 32, 16]], np.float32)
    logits = [jnp.array([[5.0, 4.0, 3.0, 9.0, -2.0]]), jnp.array([[1.0, 0.5]])]
    deltas = [jnp.zeros((1, 5, 4)), jnp.zeros((1, 2, 4))]
    boxes, valid = _proposals(logits, deltas, [level0, level1])
    # Level 0 top-4: box 3 (empty: masked), 0, 1 (suppressed by 0), 2
    # (clipped to the image); level 1: both. Merged top-3 by score.
    np.testing.assert_array_equal(valid, [[True, True, True]])
    np.testing.assert_allclose(
        boxes[0], [[0, 0, 10, 10], [20, 20, 32, 32], [8, 8, 24, 24]]
    )
    boxes, valid = _proposals(
        logits, deltas, [level0, level1], post_nms_top_k=8, min_size=11.0
    )
    # Only boxes wider and taller than 11 survive: the clipped 12 x 12 one
    # and both 16 x 16 level-1 boxes.
    np.testing.assert_array_equal(valid[0], [True] * 3 + [False] * 5)
    np.testing.assert_allclose(
        boxes[0, :3], [[20, 20, 32, 32], [8, 8, 24, 24], [16, 0, 32, 16]]
    )
    np.testing.assert_array_equal(boxes[0, 3:], 0.0)


def test_no_gradient_flows_through_proposals():
    anchors = [anchors_lib.level_anchors((32, 32), 3, 2.0, (1.0,))]

    def total(deltas):
        boxes, _ = rpn.generate_proposals(
            [jnp.linspace(0.0, 1.0, 16)[None]],
            [deltas],
            anchors,
            options=rpn.ProposalOptions(8, 4, 0.7, 0.0, _WEIGHTS, "while_loop"),
            image_size=(32, 32),
        )
        return jnp.sum(boxes)

    grad = jax.jit(jax.grad(total))(jnp.full((1, 16, 4), 0.1))
    np.testing.assert_array_equal(grad, 0.0)


def test_approximate_top_k_is_opt_in_and_finds_the_true_top_on_cpu():
    """approx_max_k is exact off TPU: the same proposals as the default."""
    anchors = [anchors_lib.level_anchors((64, 64), 2, 4.0, (1.0,))]
    rng = np.random.default_rng(0)
    logits = [jnp.asarray(rng.normal(size=(2, 256)), jnp.float32)]
    deltas = [jnp.asarray(rng.normal(scale=0.1, size=(2, 256, 4)), jnp.float32)]
    exact = _proposals(
        logits,
        deltas,
        anchors,
        pre_nms_top_k=32,
        post_nms_top_k=16,
        image_size=(64, 64),
    )
    approx = _proposals(
        logits,
        deltas,
        anchors,
        pre_nms_top_k=32,
        post_nms_top_k=16,
        image_size=(64, 64),
        approx_recall=0.95,
    )
    for e, a in zip(exact, approx, strict=True):
        np.testing.assert_array_equal(e, a)


def test_a_two_conv_head_with_a_norm_stacks_its_convs():
    """torchvision's RPNHead(conv_depth=2): two conv3x3 + ReLU, then 1x1s."""
    head = rpn.RPNHead(
        8,
        3,
        num_convs=2,
        norm=norms.NormOptions("group", 4),
        dtype=jnp.float32,
        rngs=nnx.Rngs(0),
    )
    assert len(head.more_convs) == 1
    assert head.conv.norm is not None and head.more_convs[0].norm is not None
    x = jnp.asarray(
        np.random.default_rng(0).normal(size=(2, 4, 4, 8)), jnp.float32
    )
    logits, _ = head([x])
    hidden = head.more_convs[0](head.conv(x))
    want = hidden @ head.objectness.kernel[...] + head.objectness.bias[...]
    np.testing.assert_allclose(logits[0], want.reshape(2, -1), rtol=1e-5)
    one = rpn.RPNHead(8, 3, dtype=jnp.float32, rngs=nnx.Rngs(0))
    assert not one.more_convs and one.conv.bias.shape == (8,)
