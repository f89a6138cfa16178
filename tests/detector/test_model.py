"""detector/model.py end to end on the tiny config (64 x 64, CPU-sized).

Compiled programs are built once per module and shared: one train step
(batch of one), one predict per NMS backend. The overfitting check trains
on one synthetic image with three objects and then predicts it back.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from detector import losses as losses_lib
from detector.model import MaskRCNN
from ops import box_ops, host_audit

OVERFIT_STEPS = 200


def _device_batch(example: dict) -> dict:
    return {name: jnp.asarray(value) for name, value in example.items()}


@pytest.fixture(name="config", scope="module")
def config_fixture(make_tiny_config):
    return make_tiny_config("while_loop")


@pytest.fixture(name="initial", scope="module")
def initial_fixture(config, make_rngs):
    """(graphdef, params, rest) of a freshly initialised tiny model."""
    model = MaskRCNN(config, rngs=make_rngs())
    model.train()
    return nnx.split(model, nnx.Param, ...)


class _TrainStep:
    """A jitted Adam train step that counts its traces."""

    def __init__(self, graphdef, learning_rate: float = 3e-3):
        self.traces = 0
        self.optimizer = optax.adam(learning_rate)

        def step(params, rest, opt_state, batch, key):
            self.traces += 1

            def loss_fn(params):
                model = nnx.merge(graphdef, params, rest)
                terms = model.losses(batch, key)
                return terms["total"], terms

            grads, terms = jax.grad(loss_fn, has_aux=True)(params)
            updates, opt_state = self.optimizer.update(grads, opt_state,
                                                       params)
            return (optax.apply_updates(params, updates), opt_state, terms,
                    grads)

        self.step = jax.jit(step)


@pytest.fixture(name="train_step", scope="module")
def train_step_fixture(initial):
    return _TrainStep(initial[0])


@pytest.fixture(name="overfitted", scope="module")
def overfitted_fixture(initial, train_step, make_synthetic_example):
    """Params after OVERFIT_STEPS on the synthetic image, and the losses."""
    _, params, rest = initial
    batch = _device_batch(make_synthetic_example())
    opt_state = train_step.optimizer.init(params)
    history = []
    for i in range(OVERFIT_STEPS):
        params, opt_state, terms, _ = train_step.step(
            params, rest, opt_state, batch, jax.random.key(i))
        history.append(float(terms["total"]))
    return params, history


@pytest.fixture(name="predictors", scope="module")
def predictors_fixture(initial, config):
    """backend -> jitted (params, rest, images) -> (proposals, predictions)."""
    predictors = {}
    for backend in ("while_loop", "pallas", "cpu"):
        backend_config = copy.deepcopy(config)
        backend_config.model.rpn.nms_backend = backend
        backend_config.model.detection.nms_backend = backend
        model = nnx.eval_shape(lambda c=backend_config: MaskRCNN(
            c, rngs=nnx.Rngs(0)))
        model.eval()
        graphdef = nnx.graphdef(model)

        def predict(params, rest, images, graphdef=graphdef):
            model = nnx.merge(graphdef, params, rest)
            return model.proposals(images), model.predict(images)

        predictors[backend] = jax.jit(predict)
    return predictors


def test_output_shapes_of_losses_and_predict(config, initial):
    graphdef, params, rest = initial
    batch = jax.ShapeDtypeStruct
    b, m, s = 2, config.data.max_instances, config.data.gt_mask_size
    inputs = {"image": batch((b, 64, 64, 3), jnp.float32),
              "boxes": batch((b, m, 4), jnp.float32),
              "classes": batch((b, m), jnp.int32),
              "valid": batch((b, m), bool),
              "masks": batch((b, m, s, s), jnp.uint8),
              "mask_valid": batch((b, m), bool),
              "image_id": batch((b,), jnp.int32)}
    terms = jax.eval_shape(
        lambda p, r, x, k: nnx.merge(graphdef, p, r).losses(x, k), params,
        rest, inputs, jax.random.key(0))
    assert set(terms) == set(losses_lib.LOSS_NAMES)
    assert all(t.shape == () and t.dtype == jnp.float32
               for t in terms.values())
    out = jax.eval_shape(
        lambda p, r, x: nnx.merge(graphdef, p, r).predict(x), params, rest,
        inputs["image"])
    d = config.model.detection.max_detections
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {
        "boxes": ((b, d, 4), jnp.float32), "scores": ((b, d), jnp.float32),
        "classes": ((b, d), jnp.int32),
        "masks": ((b, d, 28, 28), jnp.float32),
        "num_detections": ((b,), jnp.int32)}


def test_parameter_count_of_the_tiny_config(initial):
    # Backbone (tiny, width 8, GroupNorm, levels 2-4; see test_backbone):
    #   1,192 + 1,184 + 3,680 + 14,528                          = 20,584
    # FPN, 16 channels: laterals (8+1)*16 + (16+1)*16 + (32+1)*16 = 944;
    #   outputs 3 * (9*16*16 + 2*16)                            = 7,008
    # RPN head (3 anchors): 9*16*16+16 + (16*3+3) + (16*12+12)  = 2,575
    # Box head: 7*7*16*64+64 + 64*64+64 + 64*4+4 + 64*12+12     = 55,440
    # Mask head: 9*16*16 + 2*16 + (2*2*16*16 + 16) + 16*3+3     = 3,427
    _, params, _ = initial
    count = sum(x.size for x in jax.tree.leaves(params))
    assert count == 20_584 + 944 + 7_008 + 2_575 + 55_440 + 3_427


def test_train_step_compiles_once_with_finite_losses_and_gradients(
        initial, train_step, make_synthetic_example):
    _, params, rest = initial
    batch = _device_batch(make_synthetic_example())
    opt_state = train_step.optimizer.init(params)
    traces_before = train_step.traces
    new_params, opt_state, terms, grads = train_step.step(
        params, rest, opt_state, batch, jax.random.key(0))
    train_step.step(new_params, rest, opt_state, batch, jax.random.key(1))
    assert train_step.traces - traces_before <= 1  # no retrace
    assert set(terms) == set(losses_lib.LOSS_NAMES)
    for name, value in terms.items():
        assert np.isfinite(float(value)) and float(value) > 0.0, name
    for path, grad in jax.tree_util.tree_leaves_with_path(grads):
        grad = np.asarray(grad)
        assert np.all(np.isfinite(grad)), path
        assert np.any(grad != 0.0), path


def test_zero_instance_batch_trains_without_nan(initial, train_step,
                                                make_empty_example):
    _, params, rest = initial
    batch = _device_batch(make_empty_example())
    _, _, terms, grads = train_step.step(
        params, rest, train_step.optimizer.init(params), batch,
        jax.random.key(0))
    for name in ("rpn_box", "box", "mask"):
        assert float(terms[name]) == 0.0, name
    assert np.isfinite(float(terms["total"])) and float(terms["rpn_cls"]) > 0
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_overfitting_one_image_recovers_its_boxes(
        initial, overfitted, predictors, make_synthetic_example):
    _, _, rest = initial
    params, history = overfitted
    assert history[0] / np.mean(history[-10:]) >= 5.0, history[::20]
    example = make_synthetic_example()
    _, outputs = predictors["while_loop"](params, rest,
                                          jnp.asarray(example["image"]))
    boxes = np.asarray(outputs["boxes"][0])
    classes = np.asarray(outputs["classes"][0])
    iou = np.asarray(box_ops.pairwise_iou(jnp.asarray(example["boxes"][0]),
                                          jnp.asarray(boxes)))
    for g in range(3):
        same_class = classes == example["classes"][0, g]
        assert same_class.any(), (g, classes)
        assert iou[g][same_class].max() > 0.7, (g, iou[g], classes)
    count = int(outputs["num_detections"][0])
    masks = np.asarray(outputs["masks"][0])
    assert ((masks[:count] >= 0) & (masks[:count] <= 1)).all()
    assert (masks[count:] == 0).all()


def test_nms_backends_give_identical_proposals_and_detections(
        initial, overfitted, predictors, make_synthetic_example):
    _, _, rest = initial
    params, _ = overfitted
    images = jnp.asarray(make_synthetic_example()["image"])
    results = {backend: jax.tree.map(np.asarray, fn(params, rest, images))
               for backend, fn in predictors.items()}
    reference = results.pop("while_loop")
    assert reference[0][1].sum() > 3  # several valid proposals
    for backend, result in results.items():
        for ref, got in zip(jax.tree.leaves(reference),
                            jax.tree.leaves(result)):
            np.testing.assert_array_equal(got, ref, err_msg=backend)


def test_no_host_round_trips_unless_the_nms_backend_is_cpu(
        initial, train_step, predictors, make_synthetic_example):
    _, params, rest = initial
    batch = _device_batch(make_synthetic_example())
    # Audits reuse the programs the other tests compile (same shapes).
    assert not host_audit.audit(train_step.step, params, rest,
                                train_step.optimizer.init(params), batch,
                                jax.random.key(0))
    for backend, predict in predictors.items():
        findings = host_audit.audit(predict, params, rest, batch["image"])
        if backend == "cpu":
            scopes = " ".join(f.op_name for f in findings)
            assert "rpn/nms" in scopes and "detection/nms" in scopes
        else:
            assert not findings, (backend, findings)


def test_predict_on_an_image_without_objects_is_well_formed(
        initial, predictors, make_empty_example):
    _, params, rest = initial
    images = jnp.asarray(make_empty_example()["image"])
    _, out = predictors["while_loop"](params, rest, images)
    out = jax.tree.map(np.asarray, out)
    count = int(out["num_detections"][0])
    assert 0 <= count <= out["scores"].shape[1]
    assert (out["classes"][0, count:] == 0).all()
    assert (out["scores"][0, count:] == 0).all()
    assert (out["boxes"][0, count:] == 0).all()
    assert all(np.all(np.isfinite(v)) for v in out.values())


def test_bfloat16_activations_give_float32_losses(
        config, make_rngs, make_synthetic_example):
    bf16 = copy.deepcopy(config)
    bf16.model.dtype = "bfloat16"
    model = MaskRCNN(bf16, rngs=make_rngs())
    graphdef, state = nnx.split(model)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state))
    terms = jax.jit(lambda s, b, k: nnx.merge(graphdef, s).losses(b, k))(
        state, _device_batch(make_synthetic_example()), jax.random.key(0))
    for name, value in terms.items():
        assert value.dtype == jnp.float32 and np.isfinite(float(value)), name


@pytest.mark.parametrize("backbone, norm", [("resnet18", "batch"),
                                            ("resnet50", "frozen_batch"),
                                            ("tiny", "group")])
def test_every_backbone_and_norm_traces(config, backbone, norm):
    variant = copy.deepcopy(config)
    variant.model.backbone, variant.model.norm = backbone, norm
    variant.model.backbone_width = 8
    model = nnx.eval_shape(lambda: MaskRCNN(variant, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    example = {
        "image": jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32),
        "boxes": jax.ShapeDtypeStruct((1, 4, 4), jnp.float32),
        "classes": jax.ShapeDtypeStruct((1, 4), jnp.int32),
        "valid": jax.ShapeDtypeStruct((1, 4), bool),
        "masks": jax.ShapeDtypeStruct((1, 4, 16, 16), jnp.uint8),
        "mask_valid": jax.ShapeDtypeStruct((1, 4), bool)}
    terms = jax.eval_shape(
        lambda s, x, k: nnx.merge(graphdef, s).losses(x, k), state, example,
        jax.random.key(0))
    assert terms["total"].shape == ()


@pytest.mark.parametrize("key, value, words", [
    ("data.image_size", (72, 64), "data.image_size"),
    ("model.backbone", "resnet34", "model.backbone"),
    ("model.norm", "layer", "model.norm"),
    ("model.rpn.nms_backend", "fast", "model.rpn.nms_backend"),
    ("model.fpn_channels", 18, "model.fpn_channels"),
    ("model.dtype", "float16", "model.dtype"),
])
def test_bad_config_fails_at_construction_with_one_line(config, key, value,
                                                         words):
    bad = copy.deepcopy(config)
    node = bad
    *parents, leaf = key.split(".")
    for parent in parents:
        node = node[parent]
    node[leaf] = value
    with pytest.raises(ValueError) as error:
        MaskRCNN(bad, rngs=nnx.Rngs(0))
    message = str(error.value)
    assert words in message and "\n" not in message
