"""The whole train step and predict lower for TPU and for CUDA.

Lowered on any machine, without a TPU or GPU, and never compiled:
- the data-parallel train step (detector/engine/train_step.py) with the
  config's optimizer, its state replicated and its batch sharded over an
  abstract two-device 'data' mesh, as train_lib places them;
- the inference function (detector/inference/detect.py) exported as
  exporter.export_fn exports it (symbolic batch; each kernel lowered for
  its platform's device, ops/nms/dispatch.py), with the weights as
  arguments rather than constants.
Each program must hold the platform's Pallas NMS kernel at every NMS site
(Mosaic `tpu_custom_call` on TPU; on CUDA the kernel the pallas backend
picks for the Hopper GPU, an H100, that kernels lower for without a GPU:
the Triton call where this JAX has Pallas Triton, else Mosaic GPU's
`mosaic_gpu_v2`; ops/nms/pallas.py), no host callback, no host send, recv,
infeed or outfeed, and no custom call but the kernel and the
platform-neutral ones of jax.export and the partitioner.

The configs keep their layers, heads and NMS sites; only sizes are made
small: a global batch of 2 (one image per device), and
configs/coco_r50_fpn.py at 256 x 256 instead of 1024 x 1024 (its largest
level still has more anchors than the RPN's per-level top-k, so every NMS
call gets the shapes it gets at 1024). The 'auto' settings that the model
resolves from the default device (the activation dtype, the ROIAlign
implementation) are resolved for the target platform instead. The R50
cases run with `-m slow`; the last two tests plant what the audit must
find.
"""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import ml_collections
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import batch_file
from configs import coco_r50_fpn
from configs import shapes as shapes_config
from detector import config as config_lib
from detector import factory
from detector.engine import train_step as step_lib
from detector.inference import detect
from detector.launch import cli, validate
from detector.predict import artifact as artifact_lib
from detector.state import optimizer
from detector.state import train_state as state_lib
from ops import roi_align
from ops.nms import dispatch, pallas

BATCH = 2  # global: one image per device of the mesh
DEVICES = 2  # the data-parallel mesh
R50_IMAGE_SIZE = (256, 256)
TRITON_CALL = "__gpu$xla.gpu.triton"
# Each NMS kernel: custom-call target, how the call names its kernel
# (Mosaic GPU: a NUL-terminated string of the serialized kernel module),
# and that name.
KERNELS = {
    "tpu": (
        "tpu_custom_call",
        re.compile(r'kernel_name = "([^"]*)"'),
        "nms_tiled_tpu",
    ),
    "mosaic_gpu": (
        "mosaic_gpu_v2",
        re.compile(r"\\00(nms_tiled_mosaic_gpu)\\00"),
        "nms_tiled_mosaic_gpu",
    ),
    "triton": (TRITON_CALL, re.compile(r'\bname = "(nms_tiled)"'), "nms_tiled"),
}


def platform_kernel(platform: str) -> str | None:
    """The KERNELS entry the pallas backend lowers for `platform` (on CUDA
    for the H100 of dispatch.DEFAULT_KINDS; None where none can run)."""
    if platform == "tpu":
        return "tpu"
    with jax.sharding.use_abstract_mesh(dispatch.target_mesh("cuda")):
        return pallas.pick_cuda_kernel(None)[0]


# Custom calls allowed on any platform: jax.export's shape checks of the
# symbolic batch, and the partitioner's annotations.
NEUTRAL_CALLS = frozenset(
    (
        "shape_assertion",
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
    )
)
# The model's NMS sites in each program: the train step runs the RPN's,
# predict the RPN's and the detections'.
SITES = {"train_step": 1, "predict": 2}
_CUSTOM_CALL = re.compile(
    r'stablehlo\.custom_call @([^\s(]+)|call_target_name = "([^"]*)"'
)
_HOST_TRANSFER = re.compile(r"\bstablehlo\.(send|recv|infeed|outfeed)\b")
_CUDA_KERNEL_MISSING = pytest.mark.skipif(
    platform_kernel("cuda") is None,
    reason=f"JAX {jax.__version__} has no Pallas CUDA kernel for an H100",
)
PLATFORMS = [
    pytest.param("tpu", id="tpu"),
    pytest.param("cuda", id="cuda", marks=_CUDA_KERNEL_MISSING),
]


@dataclasses.dataclass(frozen=True)
class Audit:
    """What a lowered program holds that matters off the CPU."""

    kernels: tuple[str, ...] = ()  # the platform's NMS kernels, by name
    callbacks: tuple[str, ...] = ()  # host-callback custom-call targets
    host_transfers: tuple[str, ...] = ()  # send, recv, infeed, outfeed ops
    other_calls: tuple[str, ...] = ()  # any other, e.g. a CPU-only one


def audit(module: str, platform: str) -> Audit:
    """The kernels and host round-trips of StableHLO text `module`."""
    target, kernel_name, _ = KERNELS[platform_kernel(platform)]
    kernels, callbacks, transfers, others = [], [], [], []
    for line in module.splitlines():
        transfers += _HOST_TRANSFER.findall(line)
        for match in _CUSTOM_CALL.finditer(line):
            call = match.group(1) or match.group(2)
            if call == target:
                name = kernel_name.search(line)
                kernels.append(name.group(1) if name else "<unnamed>")
            elif "callback" in call:
                callbacks.append(call)
            elif call not in NEUTRAL_CALLS:
                others.append(call)
    return Audit(*map(tuple, (kernels, callbacks, transfers, others)))


def expected(program: str, platform: str) -> Audit:
    """The audit of a device-only `program` with pallas NMS everywhere."""
    name = KERNELS[platform_kernel(platform)][2]
    return Audit(kernels=(name,) * SITES[program])


def _build_model(config: ml_collections.ConfigDict) -> nnx.Module:
    """`config`'s model in train mode, as shapes (nothing initialised)."""

    def build():
        model = factory.build_model(config, rngs=nnx.Rngs(config.seed))
        model.train()
        return model

    return nnx.eval_shape(build)


@dataclasses.dataclass(frozen=True)
class Model:
    """A reduced config and its train-mode model, split, as shapes."""

    config: ml_collections.ConfigDict
    graphdef: nnx.GraphDef
    params: nnx.State
    rest: nnx.State


@functools.cache
def model_for(name: str, platform: str, nms: str = "pallas") -> Model:
    """Config `name` ('shapes' or 'r50') reduced (module docstring), with
    `nms` at both sites and 'auto' resolved for `platform`."""
    if name == "shapes":
        config = shapes_config.get_config()
    else:
        config = coco_r50_fpn.get_config()
        config.data.image_size = R50_IMAGE_SIZE
    config.train.batch_size = BATCH
    cli.set_nms_backend(config, nms)
    default = "gpu" if platform == "cuda" else platform  # jax's name
    model = config.model
    model.dtype = str(config_lib.resolve_dtype(model.dtype, default))
    if model.roi.align_implementation == "auto":
        model.roi.align_implementation = roi_align.AUTO_IMPLEMENTATION.get(
            default, "gather"
        )
    validate.validate(config)
    return Model(config, *nnx.split(_build_model(config), nnx.Param, ...))


def abstract_mesh(platform: str) -> jax.sharding.AbstractMesh:
    """DEVICES devices of `platform` on the 'data' axis (Auto, as the train
    step's mesh), of the kind the exporter lowers kernels for."""
    return jax.sharding.AbstractMesh(
        (DEVICES,),
        ("data",),
        (jax.sharding.AxisType.Auto,),
        abstract_device=dispatch.target_device(platform),
    )


def lower_train_step(
    model: Model, platform: str, mesh: jax.sharding.AbstractMesh
) -> str:
    """StableHLO of the model's train step on `mesh`, lowered for
    `platform`: the state replicated, the batch sharded on 'data'."""
    config = model.config
    tx, schedule = optimizer.make_optimizer(config)
    state = jax.eval_shape(
        lambda p, r: state_lib.init_state(p, r, tx), model.params, model.rest
    )
    batch = batch_file.abstract_batch(config)
    key = jax.eval_shape(lambda: jax.random.key(config.seed))

    def placed(tree, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
            tree,
        )

    step = step_lib.make_train_step(model.graphdef, tx, schedule, mesh)
    args = placed(state, P()), placed(batch, P("data")), placed(key, P())
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = step.trace(*args).lower(lowering_platforms=(platform,))
    return lowered.as_text()


def export_predict(model: Model, platform: str) -> str:
    """StableHLO of the model's served predict function, exported for
    `platform` as exporter.export_fn exports it, with the weights as
    arguments instead of constants."""
    config = model.config
    graphdef = state_lib.eval_graphdef(model.graphdef, model.params, model.rest)
    category_ids = list(range(1, config.data.num_classes + 1))

    predict = detect.detect_fn(config, graphdef, category_ids)

    (b,) = jax.export.symbolic_shape(artifact_lib.SYMBOLIC_BATCH)
    args = (
        model.params,
        model.rest,
        jax.ShapeDtypeStruct((b, *config.data.image_size, 3), jnp.float32),
        jax.ShapeDtypeStruct((b, 2), jnp.int32),
        jax.ShapeDtypeStruct((b, 2), jnp.int32),
    )
    return (
        jax.export.export(
            jax.jit(predict),
            platforms=(platform,),
            disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call(TRITON_CALL)
            ],
        )(*args)
    ).mlir_module()


CONFIGS = [
    pytest.param("shapes", id="shapes"),
    pytest.param("r50", id="r50", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", CONFIGS)
def test_train_step_lowers_with_the_kernel_and_no_host_round_trip(
    name, platform
):
    model = model_for(name, platform)
    module = lower_train_step(model, platform, abstract_mesh(platform))
    assert f"mhlo.num_partitions = {DEVICES}" in module
    assert "stablehlo.all_reduce" in module  # gradients averaged
    assert audit(module, platform) == expected("train_step", platform)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", CONFIGS)
def test_predict_exports_with_the_kernel_and_no_host_round_trip(name, platform):
    module = export_predict(model_for(name, platform), platform)
    assert audit(module, platform) == expected("predict", platform)


def test_audit_finds_the_host_callbacks_of_the_cpu_nms_backend():
    """The cpu backend's pure_callback at both sites of the model's predict,
    lowered for the CPU (a host callback lowers only where a device of its
    platform is attached)."""
    model = model_for("shapes", "cpu", nms="cpu")
    graphdef = state_lib.eval_graphdef(model.graphdef, model.params, model.rest)
    images = jax.ShapeDtypeStruct(
        (BATCH, *model.config.data.image_size, 3), jnp.float32
    )
    predict = jax.jit(lambda p, r, x: nnx.merge(graphdef, p, r).predict(x))
    with jax.default_device(jax.devices("cpu")[0]):  # on any host
        lowered = predict.trace(model.params, model.rest, images).lower(
            lowering_platforms=("cpu",)
        )
    found = audit(lowered.as_text(), "tpu")
    assert found.callbacks == ("xla_ffi_python_cpu_callback",) * 2
    assert found.kernels == ()
    assert found != expected("predict", "tpu")


def test_audit_finds_cpu_only_custom_calls_and_host_transfers():
    """LAPACK's eigensolver lowered for the CPU; a host send and recv as a
    host callback lowers on TPU (which needs a TPU attached to lower)."""
    x = jax.ShapeDtypeStruct((3, 3), jnp.float32)
    with jax.default_device(jax.devices("cpu")[0]):
        lowered = (
            jax.jit(jnp.linalg.eigh).trace(x).lower(lowering_platforms=("cpu",))
        )
    module = lowered.as_text()
    module += (
        '\n%1 = "stablehlo.send"(%0, %t) <{channel_handle = '
        "#stablehlo.channel_handle<handle = 1, type = 2>, "
        "is_host_transfer = true}> : (tensor<f32>, !stablehlo.token) -> "
        "!stablehlo.token"
        '\n%2:2 = "stablehlo.recv"(%1) <{channel_handle = '
        "#stablehlo.channel_handle<handle = 2, type = 3>, "
        "is_host_transfer = true}> : (!stablehlo.token) -> (tensor<f32>, "
        "!stablehlo.token)"
    )
    found = audit(module, "tpu")
    assert [c.split("_")[0] for c in found.other_calls] == ["lapack"]
    assert found.host_transfers == ("send", "recv")
