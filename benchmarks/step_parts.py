"""The train step broken into stages, each timed as its own compiled program.

    results = step_parts.run_parts(config, batch, mesh, reps=10, warmup=2)
    print(step_parts.table(results))

Stages (STAGES), each a jitted program over inputs computed once by a
forward pass of the same model on the same batch:

- backbone_fpn: backbone + FPN forward and backward (the loss is the sum
  of the FPN outputs);
- rpn: RPN head forward and backward, anchor targets, RPN losses;
- proposals: decode, per-level top-k, NMS, merge (forward only; gradients
  never flow through proposals);
- roi_sampling: GT appended, IoU matching, balanced sampling, box targets;
- roi_align: multilevel ROIAlign of the box and mask rois, forward and
  backward to the features;
- box_head: box head forward and backward with its losses;
- mask: mask targets, mask head forward and backward, mask loss;
- optimizer: the optax update and apply_updates.

Alternatives are timed beside the stages (in parentheses in the table):
proposals with the 'topk' baseline in place of NMS (the difference is the
NMS cost), each ROIAlign implementation, and approx_max_k proposals.

Besides the stages it times the whole train step (as train.py compiles it)
and predict, counts the model FLOPs of each program from its conv and
matmul shapes (benchmarks/flops.py) next to XLA's cost_analysis, and gives
achieved TFLOP/s and the utilisation of the device's peak where known.
"""

import copy
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from benchmarks import batch_file
from benchmarks import flops as flops_lib
from detector import config as config_lib
from detector.distributed import sharding
from detector.engine import train_step as step_lib
from detector.launch import cli
from detector.state import optimizer
from detector.state import train_state as state_lib
from ops import roi_align

STAGES = (
    "backbone_fpn",
    "rpn",
    "proposals",
    "roi_sampling",
    "roi_align",
    "box_head",
    "mask",
    "optimizer",
)


def _sum(tree) -> jax.Array:
    return sum(
        jnp.sum(x.astype(jnp.float32))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    )


class _Stages:
    """The stage programs of one model: fn(params, inputs, batch).

    Inputs and batch are arguments, not closed-over constants, so XLA
    cannot constant-fold a stage away.
    """

    def __init__(self, graphdef: nnx.GraphDef, rest: nnx.State):
        self.graphdef, self.rest = graphdef, rest

    def model(self, params):
        return nnx.merge(self.graphdef, params, self.rest, copy=True)

    def forward(self, params, batch: dict, key: jax.Array) -> dict:
        """Every stage's inputs, from one forward pass."""
        m = self.model(params)
        rpn_key, roi_key = jax.random.split(key)
        features = m.features(batch["image"])
        logits, deltas = m.rpn(features)
        proposals, valid = m.rpn.proposals(
            logits,
            deltas,
            batch["image"].shape[1:3],
            batch.get("image_size"),
            training=True,
        )
        heads = m.roi_heads
        targets = heads.sample(proposals, valid, batch, roi_key)
        pyramid = m.roi_pyramid(features)
        mask_rois = targets.rois[:, : heads.num_mask_rois]
        return {
            "features": features,
            "logits": logits,
            "deltas": deltas,
            "proposals": proposals,
            "proposal_valid": valid,
            "targets": targets,
            "rpn_key": rpn_key,
            "roi_key": roi_key,
            "pyramid_features": pyramid.features,
            "box_pooled": heads.pool(pyramid, targets.rois, heads.box_head),
            "mask_pooled": heads.pool(pyramid, mask_rois, heads.mask_head),
        }

    def backbone_fpn(self, params, inputs, batch):
        del inputs

        def loss(p):
            return _sum(self.model(p).features(batch["image"]))

        return jax.grad(loss)(params)

    def rpn(self, params, inputs, batch):
        def loss(p, features):
            m = self.model(p)
            logits, deltas = m.rpn(features)
            return _sum(m.rpn.losses(logits, deltas, batch, inputs["rpn_key"]))

        return jax.grad(loss, argnums=(0, 1))(params, inputs["features"])

    def proposals(self, params, inputs, batch):
        return self.model(params).rpn.proposals(
            inputs["logits"],
            inputs["deltas"],
            batch["image"].shape[1:3],
            batch.get("image_size"),
            training=True,
        )

    def roi_sampling(self, params, inputs, batch):
        return self.model(params).roi_heads.sample(
            inputs["proposals"],
            inputs["proposal_valid"],
            batch,
            inputs["roi_key"],
        )

    def roi_align(self, params, inputs, batch):
        del batch
        m = self.model(params)
        heads = m.roi_heads
        targets = inputs["targets"]
        pyramid = m.roi_pyramid(inputs["features"])
        mask_rois = targets.rois[:, : heads.num_mask_rois]

        def loss(flat):
            p = pyramid._replace(features=flat)
            return _sum(heads.pool(p, targets.rois, heads.box_head)) + _sum(
                heads.pool(p, mask_rois, heads.mask_head)
            )

        return jax.grad(loss)(inputs["pyramid_features"])

    def box_head(self, params, inputs, batch):
        del batch
        targets = inputs["targets"]

        def loss(p, pooled):
            return _sum(self.model(p).roi_heads.box_losses(pooled, targets))

        return jax.grad(loss, argnums=(0, 1))(params, inputs["box_pooled"])

    def mask(self, params, inputs, batch):
        def loss(p, pooled):
            return self.model(p).roi_heads.mask_loss(
                pooled, inputs["targets"], batch
            )

        return jax.grad(loss, argnums=(0, 1))(params, inputs["mask_pooled"])


def _time(fn: Callable, args: tuple, reps: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + reps):
        started = time.perf_counter()
        jax.block_until_ready(fn(*args))
        if i >= warmup:
            times.append((time.perf_counter() - started) * 1e3)
    return times


def _measure(
    fn: Callable,
    args: tuple,
    reps: int,
    warmup: int,
    donate: bool = False,
    trace_dir: str | None = None,
) -> dict:
    """Compiles fn(*args); median ms, model FLOPs and XLA's FLOPs.

    With `donate` (the train step) the first argument is threaded through
    the calls; `trace_dir` then also traces 3 more calls there.
    """
    jitted = jax.jit(fn, donate_argnums=0 if donate else ())
    compiled = jitted.lower(*args).compile()
    counted = flops_lib.count_flops(fn, *args)
    if donate:  # the step consumes its state: thread it through
        state = args[0]
        times = []
        for i in range(warmup + reps):
            started = time.perf_counter()
            state, metrics = compiled(state, *args[1:])
            jax.block_until_ready(metrics)
            if i >= warmup:
                times.append((time.perf_counter() - started) * 1e3)
        if trace_dir:
            _trace(compiled, state, args[1:], trace_dir)
    else:
        times = _time(compiled, args, reps, warmup)
    xla = flops_lib.xla_flops(compiled)
    return {
        "median_ms": float(np.median(times)),
        "p90_ms": float(np.percentile(times, 90)),
        "model_gflop": counted["total"] / 1e9,
        "xla_gflop": None if xla is None else xla / 1e9,
    }


def _with_backend(
    config: ml_collections.ConfigDict, backend: str
) -> ml_collections.ConfigDict:
    config = copy.deepcopy(config)
    cli.set_nms_backend(config, backend, allow_baselines=True)
    return config


_TOPK = "proposals, topk instead of NMS"


def _variants(config: ml_collections.ConfigDict):
    """(label, stage, config) of the alternatives timed beside the stages."""
    yield _TOPK, "proposals", _with_backend(config, "topk")
    for name in roi_align.IMPLEMENTATIONS:
        override = copy.deepcopy(config)
        override.model.roi.align_implementation = name
        yield f"roi_align, {name}", "roi_align", override
    override = copy.deepcopy(config)
    override.model.rpn.approx_top_k_recall = 0.95
    yield "proposals, approx_max_k (recall 0.95)", "proposals", override


def run_parts(
    config: ml_collections.ConfigDict,
    batch: dict,
    mesh: jax.sharding.Mesh,
    *,
    reps: int,
    warmup: int,
    backend: str,
    trace_dir: str | None = None,
) -> dict:
    """Times every stage, the whole step and predict for one NMS backend.

    `trace_dir`: also write a jax.profiler trace of 3 whole steps there.

    Returns {'stages': {name: timing}, 'step': timing, 'predict': timing,
    'nms_ms': proposals minus its topk version, 'dtype', 'device_kind'}.
    """
    config = _with_backend(config, backend)
    tx, schedule = optimizer.make_optimizer(config)
    graphdef, params, rest = state_lib.create_model(config, config.seed)
    key = jax.random.key(config.seed)
    batch = dict(batch, boxes=batch["boxes"].astype(jnp.float32))
    stages = _Stages(graphdef, rest)
    inputs = jax.jit(stages.forward)(params, batch, key)
    results = {}
    for name in STAGES:
        if name == "optimizer":
            opt_state = tx.init(params)

            def update(p, o):  # the params stand in for their gradients
                updates, o = tx.update(p, o, p)
                return optax.apply_updates(p, updates), o

            results[name] = _measure(update, (params, opt_state), reps, warmup)
        else:
            results[name] = _measure(
                getattr(stages, name), (params, inputs, batch), reps, warmup
            )
        print(f"  {name}: {results[name]['median_ms']:.2f} ms", flush=True)
    variants = {}
    for label, stage, override in _variants(config):
        variant = _Stages(
            state_lib.abstract_model(override, override.seed)[0], rest
        )
        variants[label] = _measure(
            getattr(variant, stage), (params, inputs, batch), reps, warmup
        )
        print(f"  {label}: {variants[label]['median_ms']:.2f} ms", flush=True)
    eval_graphdef = state_lib.eval_graphdef(graphdef, params, rest)
    predict = _measure(
        lambda p, images: nnx.merge(eval_graphdef, p, rest).predict(images),
        (params, batch["image"]),
        reps,
        warmup,
    )
    # Last: the step donates its state, which may share the params' buffers.
    state = sharding.replicate(state_lib.init_state(params, rest, tx), mesh)
    step_fn = step_lib.make_train_step(graphdef, tx, schedule, mesh)
    step = _measure(
        step_fn,
        (state, batch, sharding.replicate(key, mesh)),
        reps,
        warmup,
        donate=True,
        trace_dir=trace_dir,
    )
    device = jax.devices()[0]
    return {
        "stages": results,
        "step": step,
        "predict": predict,
        "variants": variants,
        "nms_ms": (
            results["proposals"]["median_ms"] - variants[_TOPK]["median_ms"]
        ),
        "backend": backend,
        "batch_size": int(batch["image"].shape[0]),
        "dtype": config_lib.resolve_dtype(config.model.dtype).name,
        "device_kind": device.device_kind,
    }


def count_parts(
    config: ml_collections.ConfigDict,
    mesh: jax.sharding.Mesh,
    canvas: tuple[int, int] | None = None,
) -> dict[str, float]:
    """Model GFLOP of each stage, the train step and predict, from shapes,
    on `canvas` (default the config's first).

    Everything is traced abstractly (nothing is initialised, compiled or
    run), so this works for any config on any machine.
    """
    tx, schedule = optimizer.make_optimizer(config)
    graphdef, params, rest = state_lib.abstract_model(config, config.seed)
    # _Stages closes over `rest` (BatchNorm statistics, a few MB at most),
    # and a closed-over abstract value cannot be read inside a trace.
    rest = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), rest)
    batch = batch_file.abstract_batch(config, canvas)
    key = jax.eval_shape(lambda: jax.random.key(0))
    stages = _Stages(graphdef, rest)
    inputs = jax.eval_shape(stages.forward, params, batch, key)
    gflop = {}
    for name in STAGES[:-1]:
        gflop[name] = (
            flops_lib.count_flops(getattr(stages, name), params, inputs, batch)[
                "total"
            ]
            / 1e9
        )
    state = jax.eval_shape(
        lambda p, r: state_lib.init_state(p, r, tx), params, rest
    )
    gflop["train step"] = (
        flops_lib.count_flops(
            step_lib.make_train_step(graphdef, tx, schedule, mesh),
            state,
            batch,
            key,
        )["total"]
        / 1e9
    )
    eval_graphdef = state_lib.eval_graphdef(graphdef, params, rest)
    gflop["predict"] = (
        flops_lib.count_flops(
            lambda p, images: nnx.merge(eval_graphdef, p, rest).predict(images),
            params,
            batch["image"],
        )["total"]
        / 1e9
    )
    return gflop


def _rate(timing: dict, peak: float | None) -> str:
    tflops = timing["model_gflop"] / timing["median_ms"]  # GFLOP/ms = TFLOP/s
    mfu = "" if peak is None else f" ({100 * tflops / peak:.1f}%)"
    return f"{tflops:.2f}{mfu}"


def table(results: dict) -> str:
    """Markdown: each stage's ms, share of the step, GFLOP and TFLOP/s."""
    step_ms = results["step"]["median_ms"]
    peak = flops_lib.peak_tflops(results["device_kind"], results["dtype"])
    lines = [
        (
            "| stage | median ms | % of step | model GFLOP | XLA GFLOP | "
            "TFLOP/s (% of peak) |"
        ),
        "|---|---|---|---|---|---|",
    ]

    def row(name, t):
        xla = "-" if t["xla_gflop"] is None else f"{t['xla_gflop']:.1f}"
        lines.append(
            f"| {name} | {t['median_ms']:.2f} | "
            f"{100 * t['median_ms'] / step_ms:.1f} | "
            f"{t['model_gflop']:.1f} | {xla} | {_rate(t, peak)} |"
        )

    for name, t in results["stages"].items():
        row(name, t)
    for name, t in results["variants"].items():
        row(f"({name})", t)
    stage_sum = sum(t["median_ms"] for t in results["stages"].values())
    outside = step_ms - results["stages"]["backbone_fpn"]["median_ms"]
    lines.append(
        f"| sum of stages | {stage_sum:.2f} | "
        f"{100 * stage_sum / step_ms:.1f} | | | |"
    )
    row("**whole train step**", results["step"])
    row("predict", results["predict"])
    images = results["batch_size"] / (step_ms / 1e3)
    lines.append("")
    lines.append(
        f"Step {step_ms:.1f} ms ({images:.1f} img/s); outside backbone+FPN "
        f"{outside:.1f} ms ({100 * outside / step_ms:.0f}%); NMS "
        f"({results['backend']}) {results['nms_ms']:.2f} ms "
        f"({100 * results['nms_ms'] / step_ms:.1f}%); peak "
        f"{'unknown' if peak is None else f'{peak:.0f} TFLOP/s'} "
        f"({results['device_kind']}, {results['dtype']})."
    )
    return "\n".join(lines)


def trace_steps(
    config: ml_collections.ConfigDict,
    batch: dict,
    mesh: jax.sharding.Mesh,
    directory: str,
    steps: int = 3,
) -> None:
    """Writes a jax.profiler trace of `steps` train steps (after warm-up)."""
    tx, schedule = optimizer.make_optimizer(config)
    graphdef, params, rest = state_lib.create_model(config, config.seed)
    state = sharding.replicate(state_lib.init_state(params, rest, tx), mesh)
    key = sharding.replicate(jax.random.key(config.seed), mesh)
    step_fn = step_lib.make_train_step(graphdef, tx, schedule, mesh)
    for _ in range(2):
        state, metrics = step_fn(state, batch, key)
    jax.block_until_ready(metrics)
    _trace(step_fn, state, (batch, key), directory, steps)


def _trace(
    step_fn: Callable, state, args: tuple, directory: str, steps: int = 3
) -> None:
    """Traces `steps` step calls into `directory` (TensorBoard, Perfetto)."""
    with jax.profiler.trace(directory, create_perfetto_trace=True):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("train_step", step_num=i):
                state, metrics = step_fn(state, *args)
                jax.block_until_ready(metrics)
