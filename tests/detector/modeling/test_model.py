"""modeling/model.py end to end on the tiny config (64 x 64, CPU-sized).

Compiled programs are built once per module and shared: one train step
(batch of one) and one predict on while_loop, and, for the `slow` checks,
on the other NMS backends. The overfitting check trains on one synthetic
image with three objects and then predicts it back.

At the operator (tests/ops/nms/test_backends.py) each NMS backend equals
the numpy reference index for index, and only the cpu backend goes
through the host; here, by default, what only the whole model shows:
both NMS sites call the backend the config names (traced, not compiled),
and the program around NMS stays on the device.
The whole-model repeats of the operator's proofs (identical proposals,
detections, losses and gradients on every backend; the host audit of each
backend's programs) run with `-m slow`.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from detector.config import resolve_dtype
from detector.distributed import determinism
from detector.factory import build_model
from detector.launch.validate import validate
from detector.modeling import losses as losses_lib
from detector.modeling.model import MaskRCNN
from ops import box_ops, host_audit
from ops import nms as nms_lib
from tests.detector import helpers
from tests.helpers import groups

pytestmark = groups.MODEL

OVERFIT_STEPS = 200
BACKENDS = ("while_loop", "pallas", "cpu")


def _device_batch(example: dict) -> dict:
    return {name: jnp.asarray(value) for name, value in example.items()}


@pytest.fixture(name="config", scope="module")
def config_fixture():
    return helpers.tiny_config("while_loop")


@pytest.fixture(name="initial", scope="module")
def initial_fixture(config):
    """(graphdef, params, rest) of a freshly initialised tiny model."""
    model = build_model(config, rngs=helpers.fast_init_rngs())
    model.train()
    return nnx.split(model, nnx.Param, ...)


def _backend_graphdef(config, backend: str, *, training: bool):
    """The graphdef of the model of `config` with both NMS sites on backend."""
    backend_config = copy.deepcopy(config)
    backend_config.model.rpn.nms_backend = backend
    backend_config.model.detection.nms_backend = backend
    model = nnx.eval_shape(
        lambda: build_model(backend_config, rngs=nnx.Rngs(0))
    )
    if training:
        model.train()
    else:
        model.eval()
    return nnx.graphdef(model)


class _TrainStep:
    """A jitted Adam train step that counts its traces."""

    def __init__(self, graphdef, learning_rate: float = 3e-3):
        self.traces = 0
        self.first_calls = None  # see run_first_calls
        self.optimizer = optax.adam(learning_rate)

        def step(params, rest, opt_state, batch, key):
            self.traces += 1

            def loss_fn(params):
                model = nnx.merge(graphdef, params, rest)
                terms = model.losses(batch, key)
                return terms["total"], terms

            grads, terms = jax.grad(loss_fn, has_aux=True)(params)
            updates, opt_state = self.optimizer.update(grads, opt_state, params)
            return (
                optax.apply_updates(params, updates),
                opt_state,
                terms,
                grads,
            )

        self.step = jax.jit(step)

    def run_first_calls(self, params, rest, batch) -> None:
        """Calls the fresh step twice and records what it did.

        The first call (key 0) takes `params`, the second (key 1) the
        updated params and optimizer state. `first_calls` keeps the trace
        count after each call and the first call's terms and grads.
        """
        assert self.traces == 0, "run_first_calls needs a fresh step"
        opt_state = self.optimizer.init(params)
        new_params, opt_state, terms, grads = self.step(
            params, rest, opt_state, batch, jax.random.key(0)
        )
        traces = [self.traces]
        self.step(new_params, rest, opt_state, batch, jax.random.key(1))
        traces.append(self.traces)
        self.first_calls = {"traces": traces, "terms": terms, "grads": grads}

    def audit(self, params, rest, batch) -> list[host_audit.HostRoundTrip]:
        """The host round-trips of the step compiled for these inputs."""
        return host_audit.audit(
            self.step,
            params,
            rest,
            self.optimizer.init(params),
            batch,
            jax.random.key(0),
        )


@pytest.fixture(name="train_step", scope="module")
def train_step_fixture(initial):
    """The shared while_loop train step, after its first two calls."""
    graphdef, params, rest = initial
    train_step = _TrainStep(graphdef)
    train_step.run_first_calls(
        params, rest, _device_batch(helpers.synthetic_example())
    )
    return train_step


@pytest.fixture(name="backend_train_steps", scope="module")
def backend_train_steps_fixture(config, train_step):
    """backend -> _TrainStep whose NMS runs on that backend."""
    steps = {"while_loop": train_step}
    for backend in BACKENDS[1:]:
        steps[backend] = _TrainStep(
            _backend_graphdef(config, backend, training=True)
        )
    return steps


@pytest.fixture(name="overfitted", scope="module")
def overfitted_fixture(initial, train_step):
    """Params after OVERFIT_STEPS on the synthetic image, and the losses."""
    _, params, rest = initial
    batch = _device_batch(helpers.synthetic_example())
    opt_state = train_step.optimizer.init(params)
    history = []
    for i in range(OVERFIT_STEPS):
        params, opt_state, terms, _ = train_step.step(
            params, rest, opt_state, batch, jax.random.key(i)
        )
        history.append(float(terms["total"]))
    return params, history


@pytest.fixture(name="predictors", scope="module")
def predictors_fixture(initial, config):
    """backend -> jitted (params, rest, images) -> outputs.

    The outputs: (test-mode proposals, predictions, train-mode proposals).
    """
    predictors = {}
    for backend in BACKENDS:
        graphdef = _backend_graphdef(config, backend, training=False)

        def predict(params, rest, images, graphdef=graphdef):
            model = nnx.merge(graphdef, params, rest)
            return (
                model.proposals(images),
                model.predict(images),
                model.proposals(images, training=True),
            )

        predictors[backend] = jax.jit(predict)
    return predictors


def _shapes(tree) -> dict:
    """(shape, dtype) of every array of a dict or NamedTuple."""
    tree = tree._asdict() if hasattr(tree, "_asdict") else tree
    return {k: (v.shape, v.dtype) for k, v in tree.items()}


def test_output_shapes_of_losses_and_predict(config, initial):
    graphdef, params, rest = initial
    batch = jax.ShapeDtypeStruct
    b, g, s = 2, config.data.max_instances, config.data.gt_mask_size
    inputs = {
        "image": batch((b, 64, 64, 3), jnp.float32),
        "boxes": batch((b, g, 4), jnp.float32),
        "classes": batch((b, g), jnp.int32),
        "valid": batch((b, g), bool),
        "masks": batch((b, g, s, s), jnp.uint8),
        "mask_valid": batch((b, g), bool),
        "image_id": batch((b,), jnp.int32),
    }
    terms = jax.eval_shape(
        lambda p, r, x, k: nnx.merge(graphdef, p, r).losses(x, k),
        params,
        rest,
        inputs,
        jax.random.key(0),
    )
    assert set(terms) == set(losses_lib.LOSS_NAMES)
    assert all(t.shape == () and t.dtype == jnp.float32 for t in terms.values())
    out = jax.eval_shape(
        lambda p, r, x: nnx.merge(graphdef, p, r).predict(x),
        params,
        rest,
        inputs["image"],
    )
    k = config.model.detection.max_detections
    assert _shapes(out) == {
        "boxes": ((b, k, 4), jnp.float32),
        "scores": ((b, k), jnp.float32),
        "classes": ((b, k), jnp.int32),
        "masks": ((b, k, 28, 28), jnp.float32),
        "num_detections": ((b,), jnp.int32),
    }


def test_output_shapes_of_proposals_and_sampled_rois(config, initial):
    graphdef, params, rest = initial
    b, g, r = 2, config.data.max_instances, config.model.roi.num_rois
    spec = jax.ShapeDtypeStruct
    inputs = {
        "image": spec((b, 64, 64, 3), jnp.float32),
        "boxes": spec((b, g, 4), jnp.float32),
        "classes": spec((b, g), jnp.int32),
        "valid": spec((b, g), bool),
    }

    def proposals_and_rois(params, rest, batch, key):
        model = nnx.merge(graphdef, params, rest)
        train = model.proposals(batch["image"], training=True)
        rois = model.roi_heads.sample(*train, batch, key)
        return model.proposals(batch["image"]), train, rois

    test, train, rois = jax.eval_shape(
        proposals_and_rois, params, rest, inputs, jax.random.key(0)
    )
    for (boxes, valid), p in (
        (test, config.model.rpn.post_nms_top_k_test),
        (train, config.model.rpn.post_nms_top_k_train),
    ):
        assert (boxes.shape, boxes.dtype) == ((b, p, 4), jnp.float32)
        assert (valid.shape, valid.dtype) == ((b, p), jnp.bool_)
    assert _shapes(rois) == {
        "rois": ((b, r, 4), jnp.float32),
        "is_valid": ((b, r), jnp.bool_),
        "classes": ((b, r), jnp.int32),
        "matched": ((b, r), jnp.int32),
        "box_targets": ((b, r, 4), jnp.float32),
    }


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


def test_train_step_traces_once_with_finite_losses_and_gradients(train_step):
    # Counted on a fresh jitted step: its first call traces once, its
    # second call (updated params and optimizer state) reuses that trace.
    assert train_step.first_calls["traces"] == [1, 1]
    terms = train_step.first_calls["terms"]
    grads = train_step.first_calls["grads"]
    assert set(terms) == set(losses_lib.LOSS_NAMES)
    for name, value in terms.items():
        assert np.isfinite(float(value)) and float(value) > 0.0, name
    for path, grad in jax.tree_util.tree_leaves_with_path(grads):
        grad = np.asarray(grad)
        assert np.all(np.isfinite(grad)), path
        assert np.any(grad != 0.0), path


def test_zero_instance_batch_trains_without_nan(initial, train_step):
    _, params, rest = initial
    batch = _device_batch(helpers.empty_example())
    _, _, terms, grads = train_step.step(
        params,
        rest,
        train_step.optimizer.init(params),
        batch,
        jax.random.key(0),
    )
    for name in ("rpn_box", "box", "mask"):
        assert float(terms[name]) == 0.0, name
    assert np.isfinite(float(terms["total"])) and float(terms["rpn_cls"]) > 0
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_overfitting_one_image_recovers_its_boxes(
    initial, overfitted, predictors
):
    _, _, rest = initial
    params, history = overfitted
    assert history[0] / np.mean(history[-10:]) >= 5.0, history[::20]
    example = helpers.synthetic_example()
    _, outputs, _ = predictors["while_loop"](
        params, rest, jnp.asarray(example["image"])
    )
    boxes = np.asarray(outputs["boxes"][0])
    classes = np.asarray(outputs["classes"][0])
    iou = np.asarray(
        box_ops.pairwise_iou(
            jnp.asarray(example["boxes"][0]), jnp.asarray(boxes)
        )
    )
    for g in range(3):
        same_class = classes == example["classes"][0, g]
        assert same_class.any(), (g, classes)
        assert iou[g][same_class].max() > 0.7, (g, iou[g], classes)
    count = int(outputs["num_detections"][0])
    masks = np.asarray(outputs["masks"][0])
    assert ((masks[:count] >= 0) & (masks[:count] <= 1)).all()
    assert (masks[count:] == 0).all()


def _assert_identical_to_while_loop(results: dict) -> dict:
    """Every backend's pytree equals the 'while_loop' one, bit for bit.

    Returns the 'while_loop' result.
    """
    reference = results.pop("while_loop")
    for backend, result in results.items():
        for ref, got in zip(
            jax.tree.leaves(reference), jax.tree.leaves(result), strict=True
        ):
            np.testing.assert_array_equal(got, ref, err_msg=backend)
    return reference


@pytest.fixture(name="nms_calls")
def nms_calls_fixture(monkeypatch):
    """Records (backend, max_output_size) of each NMS backend call traced
    while the test runs."""
    calls = []
    for name, impl in list(nms_lib._IMPLEMENTATIONS.items()):

        def recording(boxes, scores, classes, params, name=name, impl=impl):
            calls.append((name, params.max_output_size))
            return impl(boxes, scores, classes, params)

        monkeypatch.setitem(nms_lib._IMPLEMENTATIONS, name, recording)
    nms_lib._batched_call.cache_clear()  # its calls hold the backends
    yield calls
    nms_lib._batched_call.cache_clear()


@pytest.mark.parametrize(
    "rpn, detection",
    [
        ("while_loop", "while_loop"),
        ("pallas", "pallas"),
        ("cpu", "cpu"),
        ("cpu", "pallas"),
    ],
)
def test_both_nms_sites_call_the_backend_the_config_names(
    config, initial, nms_calls, rpn, detection
):
    """predict runs the RPN's NMS (K = post_nms_top_k_test) on
    model.rpn.nms_backend and the detections' (K = max_detections) on
    model.detection.nms_backend; training runs only the RPN's (K =
    post_nms_top_k_train). Traced with eval_shape: nothing compiles."""
    _, params, rest = initial
    variant = copy.deepcopy(config)
    variant.model.rpn.nms_backend = rpn
    variant.model.detection.nms_backend = detection
    model = nnx.eval_shape(lambda: build_model(variant, rngs=nnx.Rngs(0)))
    model.eval()
    graphdef = nnx.graphdef(model)
    example = helpers.synthetic_example()
    jax.eval_shape(
        lambda p, r, x: nnx.merge(graphdef, p, r).predict(x),
        params,
        rest,
        jnp.asarray(example["image"]),
    )
    assert sorted(nms_calls) == sorted(
        [
            (rpn, config.model.rpn.post_nms_top_k_test),
            (detection, config.model.detection.max_detections),
        ]
    )
    nms_calls.clear()
    model.train()
    graphdef = nnx.graphdef(model)
    jax.eval_shape(
        lambda p, r, x, k: nnx.merge(graphdef, p, r).losses(x, k),
        params,
        rest,
        _device_batch(example),
        jax.random.key(0),
    )
    assert nms_calls == [(rpn, config.model.rpn.post_nms_top_k_train)]


def test_no_host_round_trips_around_a_device_nms_backend(
    initial, train_step, predictors
):
    """The train step and predict on while_loop (the programs the tests
    above compile) hold no host callback or transfer anywhere."""
    _, params, rest = initial
    batch = _device_batch(helpers.synthetic_example())
    findings = train_step.audit(params, rest, batch)
    assert not findings, findings
    findings = host_audit.audit(
        predictors["while_loop"], params, rest, batch["image"]
    )
    assert not findings, findings


@pytest.mark.slow  # the operator's proof (tests/ops/nms), through the model
def test_nms_backends_give_identical_proposals_and_detections(
    initial, predictors
):
    # Fresh weights: many overlapping proposals and detections of every
    # class, so both NMS sites suppress a lot (no overfitting needed).
    _, params, rest = initial
    images = jnp.asarray(helpers.synthetic_example()["image"])
    results = {
        backend: jax.tree.map(np.asarray, fn(params, rest, images))
        for backend, fn in predictors.items()
    }
    (_, test_valid), _, (_, train_valid) = _assert_identical_to_while_loop(
        results
    )
    # Several valid proposals in both modes, at least as many in train.
    assert 3 < test_valid.sum() <= train_valid.sum()


@pytest.mark.slow  # the operator's proof (tests/ops/nms), through the model
def test_nms_backends_give_identical_train_step_losses_and_gradients(
    initial, backend_train_steps
):
    # Bit-identical gradients on a GPU need its deterministic reductions,
    # which tests/conftest.py turns on before JAX starts.
    assert jax.default_backend() != "gpu" or determinism.enabled()
    _, params, rest = initial
    batch = _device_batch(helpers.synthetic_example())
    results = {}
    for backend, train_step in backend_train_steps.items():
        _, _, terms, grads = train_step.step(
            params,
            rest,
            train_step.optimizer.init(params),
            batch,
            jax.random.key(7),
        )
        results[backend] = jax.tree.map(np.asarray, (terms, grads))
    terms, _ = _assert_identical_to_while_loop(results)
    assert terms["mask"] > 0.0  # the sampled rois reach every head


@pytest.mark.slow  # test_backends' audit of each backend, through the model
def test_no_host_round_trips_unless_the_nms_backend_is_cpu(
    initial, backend_train_steps, predictors
):
    _, params, rest = initial
    batch = _device_batch(helpers.synthetic_example())
    # Audits reuse the programs the other tests compile (same shapes).
    for backend, train_step in backend_train_steps.items():
        findings = train_step.audit(params, rest, batch)
        if backend == "cpu":
            # Training runs only the RPN's NMS.
            assert findings and all("rpn/nms" in f.op_name for f in findings), (
                findings
            )
        else:
            assert not findings, (backend, findings)
    for backend, predict in predictors.items():
        findings = host_audit.audit(predict, params, rest, batch["image"])
        if backend == "cpu":
            scopes = " ".join(f.op_name for f in findings)
            assert "rpn/nms" in scopes and "detection/nms" in scopes
        else:
            assert not findings, (backend, findings)


def test_predict_on_an_image_without_objects_is_well_formed(
    initial, predictors
):
    _, params, rest = initial
    images = jnp.asarray(helpers.empty_example()["image"])
    _, out, _ = predictors["while_loop"](params, rest, images)
    out = jax.tree.map(np.asarray, out)
    count = int(out["num_detections"][0])
    assert 0 <= count <= out["scores"].shape[1]
    assert (out["classes"][0, count:] == 0).all()
    assert (out["scores"][0, count:] == 0).all()
    assert (out["boxes"][0, count:] == 0).all()
    assert all(np.all(np.isfinite(v)) for v in out.values())


def _activation_dtypes(model: MaskRCNN) -> dict:
    """Dtypes of the FPN levels, pooled roi features and RPN logits."""
    graphdef, state = nnx.split(model)

    def activations(state, images, boxes):
        model = nnx.merge(graphdef, state)
        features = model.features(images)
        pooled = model.roi_heads.pool(
            model.roi_pyramid(features), boxes, model.roi_heads.box_head
        )
        logits, _ = model.rpn(features)
        return features, pooled, logits

    features, pooled, logits = jax.eval_shape(
        activations,
        state,
        jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32),
        jax.ShapeDtypeStruct((1, 5, 4), jnp.float32),
    )
    return {
        "fpn": {f.dtype.name for f in features},
        "pooled": pooled.dtype.name,
        "rpn_logits": {x.dtype.name for x in logits},
    }


def test_bfloat16_activations_give_float32_losses(config):
    bf16 = copy.deepcopy(config)
    bf16.model.dtype = "bfloat16"
    model = build_model(bf16, rngs=helpers.fast_init_rngs())
    assert _activation_dtypes(model) == {
        "fpn": {"bfloat16"},
        "pooled": "bfloat16",
        "rpn_logits": {"float32"},
    }
    graphdef, state = nnx.split(model)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state))
    terms = jax.jit(lambda s, b, k: nnx.merge(graphdef, s).losses(b, k))(
        state, _device_batch(helpers.synthetic_example()), jax.random.key(0)
    )
    for name, value in terms.items():
        assert value.dtype == jnp.float32 and np.isfinite(float(value)), name


def test_auto_dtype_is_float32_on_cpu_and_bfloat16_on_accelerators(
    config, monkeypatch
):
    assert resolve_dtype("auto", "cpu") == jnp.float32
    assert resolve_dtype("auto", "gpu") == jnp.bfloat16
    assert resolve_dtype("auto", "tpu") == jnp.bfloat16
    assert resolve_dtype("float32", "tpu") == jnp.float32
    auto = copy.deepcopy(config)
    auto.model.dtype = "auto"
    for platform, dtype in (("cpu", "float32"), ("gpu", "bfloat16")):
        with monkeypatch.context() as patch:
            patch.setattr(jax, "default_backend", lambda p=platform: p)
            model = nnx.eval_shape(lambda: build_model(auto, rngs=nnx.Rngs(0)))
        assert _activation_dtypes(model)["fpn"] == {dtype}, platform


@pytest.mark.parametrize(
    "backbone, norm",
    [
        ("resnet18", "batch"),
        ("resnet50", "frozen_batch"),
        ("resnet101", "frozen_batch"),
        ("tiny", "group"),
    ],
)
def test_every_backbone_and_norm_traces(config, backbone, norm):
    variant = copy.deepcopy(config)
    variant.model.backbone, variant.model.norm = backbone, norm
    variant.model.backbone_width = 8
    model = nnx.eval_shape(lambda: build_model(variant, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    example = {
        "image": jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32),
        "boxes": jax.ShapeDtypeStruct((1, 4, 4), jnp.float32),
        "classes": jax.ShapeDtypeStruct((1, 4), jnp.int32),
        "valid": jax.ShapeDtypeStruct((1, 4), bool),
        "masks": jax.ShapeDtypeStruct((1, 4, 16, 16), jnp.uint8),
        "mask_valid": jax.ShapeDtypeStruct((1, 4), bool),
    }
    terms = jax.eval_shape(
        lambda s, x, k: nnx.merge(graphdef, s).losses(x, k),
        state,
        example,
        jax.random.key(0),
    )
    assert terms["total"].shape == ()


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("data.image_size", (72, 64), "data.image_size"),
        ("model.backbone", "resnet34", "model.backbone"),
        ("model.norm", "layer", "model.norm"),
        ("model.rpn.nms_backend", "fast", "model.rpn.nms_backend"),
        ("model.fpn_channels", 18, "model.fpn_channels"),
        ("model.dtype", "float16", "model.dtype"),
        ("model.min_level", 1, "levels model.backbone='tiny' provides"),
        ("model.freeze_at", 6, "model.freeze_at"),
        (
            "model.init_checkpoint",
            "runs/a",
            "set at most one of model.backbone_init and model.init_checkpoint",
        ),
    ],
)
def test_bad_config_fails_validation_with_one_line(config, key, value, words):
    bad = copy.deepcopy(config)
    node = bad
    *parents, leaf = key.split(".")
    for parent in parents:
        node = node[parent]
    node[leaf] = value
    bad.model.backbone_init = "r50.safetensors"  # alone: no error
    with pytest.raises(ValueError) as error:
        validate(bad)  # where a run starts, before the model is built
    message = str(error.value)
    assert words in message and "\n" not in message
