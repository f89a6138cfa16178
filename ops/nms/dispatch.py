"""Per-platform code whose branches are lowered for their own platform only,
so one exported program can hold the TPU, CUDA and CPU NMS kernels
(docs/export-and-predict.md, "Multi-platform")."""

import contextlib
from collections.abc import Callable

import jax

# lower_per_platform (not re-exported by jax.interpreters.mlir) emits one
# case per platform and lowers each rule with only its platforms.
from jax._src.interpreters import mlir as mlir_internal
from jax.extend import core as jex_core
from jax.interpreters import mlir

# The device kind each kernel platform is lowered for where this host has no
# such device (on a host that has one, its own kind).
DEFAULT_KINDS = {"tpu": "TPU v5 lite", "cuda": "NVIDIA H100 80GB HBM3"}
# Compute capabilities of CUDA device kinds, for lowering without such a
# device attached (an attached device reports its own).
COMPUTE_CAPABILITIES = {
    "NVIDIA H100 80GB HBM3": (9, 0),
    "NVIDIA H200": (9, 0),
    "NVIDIA A100-SXM4-80GB": (8, 0),
    "NVIDIA A100-SXM4-40GB": (8, 0),
}
# Lowering platform -> the platform names its devices report.
_DEVICE_PLATFORMS = {"tpu": ("tpu",), "cuda": ("cuda", "gpu")}

_platform_switch_p = jex_core.Primitive("platform_switch")
_platform_switch_p.multiple_results = True


def _default_branch_type(avals, branches, default):
    """The outputs and effects of the default branch, the one traced when the
    primitive is bound: the ordered host callbacks of a kernel in Pallas' GPU
    interpret mode thread their token through it."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    jaxpr = jax.make_jaxpr(default)(*specs)
    outs = [jax.core.ShapedArray(o.shape, o.dtype) for o in jaxpr.out_avals]
    return outs, jaxpr.effects


def target_device(platform: str) -> jax.sharding.AbstractDevice:
    """The device `platform`'s kernels lower for: the default device where
    it is of that platform, else DEFAULT_KINDS[platform]."""
    device = jax.devices()[0]
    kind = (
        device.device_kind
        if device.platform in _DEVICE_PLATFORMS[platform]
        else DEFAULT_KINDS[platform]
    )
    cores = 1 if platform == "tpu" else None
    return jax.sharding.AbstractDevice(
        device_kind=kind, num_cores=cores, platform=platform
    )


def target_mesh(platform: str) -> jax.sharding.AbstractMesh:
    """A one-device abstract mesh of `target_device(platform)` (axis 'x',
    Auto: it shards nothing)."""
    return jax.sharding.AbstractMesh(
        (1,),
        ("x",),
        (jax.sharding.AxisType.Auto,),
        abstract_device=target_device(platform),
    )


def lowering_device(platform: str):
    """The device `platform`'s branch lowers for: the active abstract mesh's
    device where it is of that platform, else `target_device(platform)`."""
    device = jax.sharding.get_abstract_mesh().abstract_device
    if device is not None and device.platform in _DEVICE_PLATFORMS[platform]:
        return device
    return target_device(platform)


def compute_capability(device) -> tuple[int, int] | None:
    """A CUDA device's compute capability, (9, 0) for Hopper: its own, an
    attached device's of the same kind, or COMPUTE_CAPABILITIES' entry;
    None for a kind none of them knows."""
    for known in (device, *jax.devices()):
        version = getattr(known, "compute_capability", None)
        if version and known.device_kind == device.device_kind:
            major, minor = str(version).split(".")[:2]
            return int(major), int(minor)
    return COMPUTE_CAPABILITIES.get(device.device_kind)


def _on_device(platform: str):
    """A context lowering `platform`'s branch on such a device: a one-device
    abstract mesh of `target_device(platform)`, so that Mosaic knows its TPU
    generation and Triton and the pallas backend the GPU's compute
    capability; no change where the mesh or the default device is one."""
    if platform not in _DEVICE_PLATFORMS:
        return contextlib.nullcontext()
    names = _DEVICE_PLATFORMS[platform]
    device = jax.sharding.get_abstract_mesh().abstract_device
    if device is None:
        device = jax.devices()[0]
    if device.platform in names:
        return contextlib.nullcontext()
    return jax.sharding.use_abstract_mesh(target_mesh(platform))


def _branch_rule(platform: str, fn):
    rule = mlir.lower_fun(fn, multiple_results=True)

    def lower(ctx, *args):
        with _on_device(platform):
            return rule(ctx, *args)

    return lower


def _lowering(ctx, *args, branches, default):
    rules = {platform: _branch_rule(platform, fn) for platform, fn in branches}
    return mlir_internal.lower_per_platform(
        ctx,
        "platform_switch",
        rules,
        mlir.lower_fun(default, multiple_results=True),
        _default_branch_type(ctx.avals_in, branches, default)[1],
        *args,
    )


_platform_switch_p.def_effectful_abstract_eval(
    lambda *avals, branches, default: _default_branch_type(
        avals, branches, default
    )
)


def _eager(*args, branches, default):
    """Outside jit: the default device's branch, run as it is."""
    platform = jax.default_backend()
    platform = "cuda" if platform == "gpu" else platform
    return list(dict(branches).get(platform, default)(*args))


_platform_switch_p.def_impl(_eager)
mlir.register_lowering(_platform_switch_p, _lowering)


def platform_switch(
    *args: jax.Array,
    default: Callable[..., tuple[jax.Array, ...]],
    **per_platform: Callable[..., tuple[jax.Array, ...]],
) -> list[jax.Array]:
    """`per_platform[lowering platform](*args)`, else `default(*args)`.

    The primitive has no differentiation or batching rules: the NMS backends
    call it on stop_gradient inputs, inside their custom_vmap.

    Args:
      *args: arrays passed to the branch.
      default: the branch of platforms not named.
      **per_platform: platform name ('cpu', 'cuda', 'rocm', 'tpu') ->
        branch; each returns a tuple of arrays, the same shapes for all.

    Returns:
      The branch's outputs, as a list.
    """
    return _platform_switch_p.bind(
        *args, branches=tuple(sorted(per_platform.items())), default=default
    )
