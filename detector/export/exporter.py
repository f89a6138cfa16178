"""A workdir's predict function serialized with `jax.export`, once per
canvas, the weights once after them: predict.jax and predict.json, one
symbolic batch dimension, several platforms in one file
(docs/export-and-predict.md)."""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from detector.distributed import sharding
from detector.export import categories as categories_lib
from detector.export import serving
from detector.imaging import canvases as canvases_lib
from detector.imaging import images as images_lib
from detector.inference import detect
from detector.predict import artifact as artifact_lib
from detector.predict import artifact_meta
from detector.state import train_state
from detector.utils import files
from ops import nms as nms_lib
from ops.nms import dispatch

PLATFORMS = ("cpu", "cuda", "tpu")
# Pallas' Triton kernel is a custom call jax.export does not list as
# stable (its Mosaic GPU kernels it does); 'pallas' and 'auto' run it on
# CUDA GPUs wherever JAX has it (ops/nms/pallas.py, CUDA_KERNELS).
_TRITON_CALL = "__gpu$xla.gpu.triton"
_NMS_SITES = ("rpn", "detection")  # config.model.<site>.nms_backend


def check_platforms(platforms: tuple[str, ...]) -> None:
    """Raises ValueError unless `platforms` are known and not repeated."""
    unknown = [p for p in platforms if p not in PLATFORMS]
    if not platforms or unknown or len(set(platforms)) != len(platforms):
        raise ValueError(
            f"--platforms={','.join(platforms)}: name each of "
            f"{', '.join(PLATFORMS)} at most once"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )


def nms_per_platform(
    config: ml_collections.ConfigDict,
    platforms: tuple[str, ...],
    nms: str | None = None,
) -> dict[str, dict[str, str]]:
    """{platform: {site: backend that runs}} ('auto' resolved per platform).

    `nms` is the --nms flag's value, already set in `config` (named in the
    error instead of the config key).

    Raises:
      ValueError: an unknown backend, or a site that resolves to the host
        'cpu' backend somewhere: its pure_callback cannot be serialized.
    """
    resolved = {}
    for platform in platforms:
        resolved[platform] = {}
        for site in _NMS_SITES:
            name = config.model[site].nms_backend
            key = f"config.model.{site}.nms_backend"
            nms_lib.check_backend(name, name="--nms" if nms else key)
            backend = nms_lib.resolve_backend(name, platform)
            if backend == "cpu":
                source = f"--nms={nms}" if nms else f"{key}={name!r}"
                raise ValueError(
                    f"{source}: the cpu NMS backend runs on the host through "
                    "a host callback (jax.pure_callback), and host callbacks "
                    "cannot be exported; use --nms=pallas, --nms=while_loop "
                    "or --nms=auto"
                )
            resolved[platform][site] = backend
    return resolved


def restore(
    config: ml_collections.ConfigDict, workdir: pathlib.Path
) -> detect.Weights:
    """The newest intact checkpoint of `workdir`, weights as numpy."""
    weights = train_state.restore_weights(config, workdir, sharding.make_mesh())
    params, rest = jax.device_get((weights.params, weights.rest))
    return dataclasses.replace(weights, params=params, rest=rest)


@dataclasses.dataclass(frozen=True)
class Served:
    """The served function of a workdir (weights as its first argument),
    its weights on the host, categories and step."""

    fn: serving.WeightedFn
    weights: list[np.ndarray]
    categories: list[dict]
    step: int


def served(config: ml_collections.ConfigDict, workdir: pathlib.Path) -> Served:
    """The served predict function of the newest intact checkpoint of
    `workdir` (or its init_checkpoint model), with the categories it names;
    `config` is validated by the caller.

    Raises:
      ValueError / FileNotFoundError: unreadable categories or no intact
        checkpoint (one line).
    """
    categories = categories_lib.categories(config)
    weights = restore(config, workdir)
    fn, leaves = serving.weighted_fn(
        config,
        weights.graphdef,
        weights.params,
        weights.rest,
        [c["id"] for c in categories],
    )
    return Served(fn, leaves, categories, weights.step)


def export_fn(
    fn,
    canvas: tuple[int, int],
    platforms: tuple[str, ...],
    weights: list | None = None,
) -> jax.export.Exported:
    """jax.export of fn(weights, f32[b, H, W, 3], i32[b, 2], i32[b, 2]) on
    the (H, W) `canvas`, b symbolic, `weights` the arrays (or shapes) whose
    types the first argument takes; without `weights`, of fn(images,
    image_sizes, orig_sizes)."""
    (batch,) = jax.export.symbolic_shape(artifact_lib.SYMBOLIC_BATCH)
    args = (
        jax.ShapeDtypeStruct((batch, *canvas, 3), jnp.float32),
        jax.ShapeDtypeStruct((batch, 2), jnp.int32),
        jax.ShapeDtypeStruct((batch, 2), jnp.int32),
    )
    if weights is not None:
        types = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights]
        args = (types, *args)
    return jax.export.export(
        jax.jit(fn),
        platforms=platforms,
        disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call(_TRITON_CALL)
        ],
    )(*args)


@dataclasses.dataclass(frozen=True)
class Serialized:
    """predict.jax's sections: each canvas's function, then the weights."""

    functions: list[jax.export.Exported]
    blobs: list[bytes]
    weights: bytes

    @property
    def data(self) -> bytes:
        return b"".join(self.blobs) + self.weights


def serialize(
    fn: serving.WeightedFn,
    weights: list,
    canvases: tuple[tuple[int, int], ...],
    platforms: tuple[str, ...],
) -> Serialized:
    """`fn` exported once per canvas, with the weights as raw bytes: each
    leaf's C-order values in the order of the first argument, their shapes
    and dtypes those of the functions' own argument types."""
    functions = [export_fn(fn, c, platforms, weights) for c in canvases]
    return Serialized(
        functions,
        [bytes(exported.serialize()) for exported in functions],
        b"".join(np.ascontiguousarray(w).tobytes() for w in weights),
    )


def export_workdir(
    config: ml_collections.ConfigDict,
    workdir: pathlib.Path,
    out: pathlib.Path,
    *,
    platforms: tuple[str, ...] = ("cpu",),
    nms: str | None = None,
) -> dict:
    """Exports the newest checkpoint of `workdir` to `out`; returns the meta.

    `nms` is the --nms flag's value, already set in `config` at both sites
    by the caller, which also validated `config`
    (detector/launch/validate.py); errors name the flag.

    Everything else that can be checked (platforms, NMS backends, the
    categories) is checked before the checkpoint is read or anything is
    written.

    Raises:
      ValueError / FileNotFoundError: one line naming the flag, key or file.
    """
    check_platforms(platforms)
    nms_backends = nms_per_platform(config, platforms, nms)
    files.check_writable_folder(out, "--out")
    model = served(config, workdir)
    canvases = canvases_lib.canvases(config.data)
    # One function per canvas, one after another (canvas_bytes), then the
    # weights they all take (weights_bytes).
    sections = serialize(model.fn, model.weights, canvases, platforms)
    data = sections.data
    exported = sections.functions[0]  # platforms, calling convention: alike
    meta = {
        "format_version": artifact_meta.FORMAT_VERSION,
        "canvases": [list(canvas) for canvas in canvases],
        "canvas_bytes": [len(blob) for blob in sections.blobs],
        "weights_bytes": len(sections.weights),
        "resize": images_lib.Resize.of(config.data)._asdict(),
        "batch_sizes": artifact_lib.SYMBOLIC_BATCH,
        "pixel_mean": list(config.data.pixel_mean),
        "pixel_std": list(config.data.pixel_std),
        "categories": model.categories,
        "num_classes": config.data.num_classes,
        "nms_backend": nms_backends,
        "jax_version": jax.__version__,
        "calling_convention_version": exported.calling_convention_version,
        "platforms": list(exported.platforms),
        "checkpoint_step": model.step,
        "max_detections": config.model.detection.max_detections,
        "mask_size": config.model.roi.mask_size,
        "mask_paste": config.eval.mask_paste,
        "tpu_device_kind": dispatch.target_device("tpu").device_kind
        if "tpu" in platforms
        else None,
        "sha256": artifact_lib.sha256(data),
    }
    meta[artifact_meta.BOUND_DIGESTS] = artifact_meta.bound_digests(meta)
    out.mkdir(parents=True, exist_ok=True)
    files.write_bytes(out / artifact_lib.ARTIFACT_FILE, data)
    files.write_text(
        out / artifact_lib.META_FILE, json.dumps(meta, indent=2) + "\n"
    )
    return meta


def summary(meta: dict, out: pathlib.Path) -> str:
    """export.py's last line: the step, the folder, the canvases, the
    platforms and the NMS backend each platform runs."""
    backends = ", ".join(
        f"on {platform}: {'/'.join(sorted(set(sites.values())))}"
        for platform, sites in meta["nms_backend"].items()
    )
    canvases = ", ".join(f"{h} x {w}" for h, w in meta["canvases"])
    return (
        f"exported step {meta['checkpoint_step']} to {out} (canvas"
        f"{'es' * (len(meta['canvases']) > 1)} {canvases}) for "
        f"{', '.join(meta['platforms'])}; NMS backend {backends}"
    )
