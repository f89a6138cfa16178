"""The project's programs compiled ahead of time for a TPU topology, on a
host without a TPU (libtpu installed: the `tpu` extra; docs/tpu.md).

Each program is traced on ShapeDtypeStructs placed on a mesh of the
topology's devices (the train step's own `sharding.make_mesh`), lowered
for "tpu" and compiled by libtpu's XLA and Mosaic compilers:
- the train step (engine/train_step.py, data-parallel over every chip,
  state replicated, batch sharded) on one training canvas;
- predict (inference/detect.detect_fn sharded, as the evaluations run it);
- the exported artifact's function (export/exporter.export_fn, batch
  symbolic, weights as arguments) called on one chip.
Nothing is initialised: the model, optimizer state and batch are shapes.
"""

import collections
import copy
import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import batch_file
from detector import config as config_lib
from detector.distributed import sharding
from detector.engine import train_step as step_lib
from detector.export import exporter, serving
from detector.imaging.canvases import Canvas
from detector.inference import detect
from detector.launch import cli, tpu_fit, validate
from detector.state import optimizer
from detector.state import train_state as state_lib
from ops import nms as nms_lib
from ops import roi_align

# libtpu takes a lock file per host, which would keep a second compiling
# process (another benchmark, a pytest-xdist worker) from loading it; with
# no TPU attached there is nothing to guard.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

# The Mosaic kernel's custom call in a compiled TPU program.
MOSAIC_CALL = "tpu_custom_call"
PROGRAMS = ("train_step", "predict", "artifact")


def topology(name: str) -> Any:
    """The TPU topology `name` ('v5e:2x2', 'v6e:2x2', 'v4:2x2x1', ...).

    Raises:
      ValueError: one line naming --topology, where libtpu does not know it.
    """
    try:
        return topologies.get_topology_desc(platform="tpu", topology_name=name)
    except Exception as e:  # libtpu's own error types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"--topology={name}: libtpu cannot describe it ({first})"
        ) from None


def for_tpu(config: ml_collections.ConfigDict, nms: str) -> Any:
    """A copy of `config` with `nms` at both sites and the settings 'auto'
    resolves from the default device resolved for TPU instead."""
    config = copy.deepcopy(config)
    cli.set_nms_backend(config, nms)
    model = config.model
    model.dtype = str(config_lib.resolve_dtype(model.dtype, "tpu"))
    if model.roi.align_implementation == "auto":
        model.roi.align_implementation = roi_align.AUTO_IMPLEMENTATION["tpu"]
    validate.validate(config)
    return config


@dataclasses.dataclass(frozen=True)
class Report:
    """What the TPU compiler says of one compiled program (per chip)."""

    program: str
    canvas: Canvas
    batch: int  # the program's global batch
    chips: int
    memory: dict[str, int]  # memory_analysis, bytes
    cost: dict[str, float]  # cost_analysis: flops, bytes accessed, ...
    mosaic_calls: int  # Mosaic kernel calls in the compiled program
    custom_calls: dict[str, int]  # every custom-call target, with counts
    hlo: str = dataclasses.field(repr=False, default="")

    @property
    def hbm_bytes(self) -> int:
        """Peak HBM of one chip (tpu_fit.peak_bytes)."""
        return tpu_fit.peak_bytes(self.memory)

    def summary(self) -> dict[str, Any]:
        """The report as JSON-ready numbers (without the HLO)."""
        out = dataclasses.asdict(self)
        del out["hlo"]
        out["hbm_bytes"] = self.hbm_bytes
        return out


_MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)
_CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')
_COST_FIELDS = ("flops", "bytes accessed", "optimal_seconds", "transcendentals")


def report(
    program: str,
    canvas: Canvas,
    batch: int,
    chips: int,
    compiled: jax.stages.Compiled,
) -> Report:
    """The memory and cost analyses of `compiled`, and its Mosaic calls."""
    stats = compiled.memory_analysis()
    memory = {f: int(getattr(stats, f)) for f in _MEMORY_FIELDS}
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older JAX: one dict per program
        cost = cost[0]
    cost = {f: float(cost[f]) for f in _COST_FIELDS if f in cost}
    hlo = compiled.as_text()
    targets = collections.Counter(_CUSTOM_CALL.findall(hlo))
    return Report(
        program,
        canvas,
        batch,
        chips,
        memory,
        cost,
        targets[MOSAIC_CALL],
        dict(targets),
        hlo,
    )


def _placed(tree: Any, sharding_: jax.sharding.Sharding) -> Any:
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding_),
        tree,
    )


def _compile(fn: Callable, *args: Any) -> jax.stages.Compiled:
    return fn.trace(*args).lower(lowering_platforms=("tpu",)).compile()


def compile_train_step(
    config: ml_collections.ConfigDict, mesh: Mesh, canvas: Canvas
) -> Report:
    """The data-parallel train step on `canvas`, for the global batch
    config.train.batch_size over the chips of `mesh`."""
    tx, schedule = optimizer.make_optimizer(config)
    graphdef, params, rest = state_lib.abstract_model(config, config.seed)
    state = jax.eval_shape(
        lambda p, r: state_lib.init_state(p, r, tx), params, rest
    )
    batch = batch_file.abstract_batch(config, canvas)
    key = jax.eval_shape(lambda: jax.random.key(config.seed))
    step = step_lib.make_train_step(graphdef, tx, schedule, mesh)
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    compiled = _compile(
        step,
        _placed(state, replicated),
        _placed(batch, rows),
        _placed(key, replicated),
    )
    return report(
        "train_step", canvas, config.train.batch_size, mesh.size, compiled
    )


def _eval_model(config: ml_collections.ConfigDict) -> tuple:
    graphdef, params, rest = state_lib.abstract_model(config, config.seed)
    return state_lib.eval_graphdef(graphdef, params, rest), params, rest


def compile_predict(
    config: ml_collections.ConfigDict, mesh: Mesh, canvas: Canvas
) -> Report:
    """The inference function as the evaluations run it: config.eval.
    batch_size images on `canvas`, sharded over the chips of `mesh`,
    weights replicated."""
    graphdef, params, rest = _eval_model(config)
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    b = config.eval.batch_size
    category_ids = list(range(1, config.data.num_classes + 1))
    sizes = jax.ShapeDtypeStruct((b, 2), jnp.int32, sharding=rows)
    compiled = _compile(
        detect.sharded(detect.detect_fn(config, graphdef, category_ids), mesh),
        _placed(params, replicated),
        _placed(rest, replicated),
        jax.ShapeDtypeStruct((b, *canvas, 3), jnp.float32, sharding=rows),
        sizes,
        sizes,
    )
    return report("predict", canvas, b, mesh.size, compiled)


def compile_artifact(
    config: ml_collections.ConfigDict, mesh: Mesh, canvas: Canvas
) -> Report:
    """The exported artifact's function (export.py's, TPU only) called on
    one chip with config.eval.batch_size images on `canvas`."""
    graphdef, params, rest = _eval_model(config)
    category_ids = list(range(1, config.data.num_classes + 1))
    fn, weights = serving.weighted_fn(
        config, graphdef, params, rest, category_ids
    )
    with jax.sharding.use_abstract_mesh(_one_chip(mesh).abstract_mesh):
        exported = exporter.export_fn(fn, canvas, ("tpu",), weights)
    chip = NamedSharding(_one_chip(mesh), P())
    b = config.eval.batch_size
    compiled = _compile(
        jax.jit(exported.call),
        _placed(weights, chip),
        jax.ShapeDtypeStruct((b, *canvas, 3), jnp.float32, sharding=chip),
        jax.ShapeDtypeStruct((b, 2), jnp.int32, sharding=chip),
        jax.ShapeDtypeStruct((b, 2), jnp.int32, sharding=chip),
    )
    return report("artifact", canvas, b, 1, compiled)


def _one_chip(mesh: Mesh) -> Mesh:
    return Mesh(mesh.devices.reshape(-1)[:1], ("data",))


def compile_nms(
    mesh: Mesh,
    backend: str,
    *,
    images: int = 2,
    boxes: int = 4000,
    keep: int = 1000,
) -> Report:
    """ops.nms alone on one chip: `images` x `boxes` boxes, K=`keep`."""
    chip = NamedSharding(_one_chip(mesh), P())
    fn = jax.jit(
        lambda b, s: nms_lib.nms(
            b, s, max_output_size=keep, iou_threshold=0.5, backend=backend
        )
    )
    compiled = _compile(
        fn,
        jax.ShapeDtypeStruct((images, boxes, 4), jnp.float32, sharding=chip),
        jax.ShapeDtypeStruct((images, boxes), jnp.float32, sharding=chip),
    )
    return report(f"nms[{backend}]", (boxes, keep), images, 1, compiled)


COMPILERS: dict[str, Callable[..., Report]] = {
    "train_step": compile_train_step,
    "predict": compile_predict,
    "artifact": compile_artifact,
}


def topology_mesh(name: str) -> Mesh:
    """The train step's data-parallel mesh over topology `name`'s chips."""
    return sharding.make_mesh(topology(name).devices)


def device_kind(mesh: Mesh) -> str:
    """The chips' kind, e.g. 'TPU v5 lite'."""
    return mesh.devices.reshape(-1)[0].device_kind
