"""Analytic FLOP count of a JAX function from its conv and matmul shapes.

    count = count_flops(fn, *args)    # {'conv': ..., 'dot': ..., 'total': ...}

Walks the function's jaxpr (into jit, shard_map, custom_vjp, cond and scan
bodies) and counts 2 multiply-adds per MAC of every `conv_general_dilated`
and `dot_general`, from their operand shapes alone; elementwise work,
gathers and reductions are not counted, so this is the model FLOPs of
MFU, independent of what XLA fuses or reports in `cost_analysis()`. The
gradient convolutions of a strided conv (input gradient with lhs_dilation)
count only the MACs that touch real, non-inserted input values. A
while_loop body (NMS) counts once, since its trip count is data-dependent.

Peak rates (dense, per chip) by `device_kind`, for the utilisation: see
PEAK_TFLOPS.
"""

import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.extend import core as jax_core

# Dense (no sparsity) peak TFLOP/s per chip by jax device_kind and dtype,
# from the vendors' data sheets. Unknown kinds report no utilisation.
PEAK_TFLOPS = {
    "NVIDIA H100 80GB HBM3": {"bfloat16": 989.0, "float32": 494.0},
    "NVIDIA H100 PCIe": {"bfloat16": 756.0, "float32": 378.0},
    "NVIDIA H200": {"bfloat16": 989.0, "float32": 494.0},
    "NVIDIA A100-SXM4-80GB": {"bfloat16": 312.0, "float32": 156.0},
    "NVIDIA A100-SXM4-40GB": {"bfloat16": 312.0, "float32": 156.0},
    "TPU v4": {"bfloat16": 275.0, "float32": 275.0},
    "TPU v5 lite": {"bfloat16": 197.0, "float32": 197.0},
    "TPU v5p": {"bfloat16": 459.0, "float32": 459.0},
}


def peak_tflops(device_kind: str, dtype: str) -> float | None:
    """The chip's dense peak for `dtype`, or None when not known."""
    return PEAK_TFLOPS.get(device_kind, {}).get(dtype)


def _conv_flops(eqn) -> float:
    lhs, rhs = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    rhs_spec = eqn.params["dimension_numbers"].rhs_spec
    # rhs_spec: (out feature dim, in feature dim, spatial dims...).
    macs_per_output = rhs.shape[rhs_spec[1]] * math.prod(
        rhs.shape[d] for d in rhs_spec[2:]
    )
    dilation = math.prod(eqn.params.get("lhs_dilation") or (1,))
    del lhs
    return 2.0 * math.prod(out.shape) * macs_per_output / dilation


def _dot_flops(eqn) -> float:
    lhs = eqn.invars[0].aval
    out = eqn.outvars[0].aval
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    return (
        2.0
        * math.prod(out.shape)
        * math.prod(lhs.shape[d] for d in lhs_contract)
    )


_COUNTERS = {
    "conv_general_dilated": ("conv", _conv_flops),
    "dot_general": ("dot", _dot_flops),
}


def _sub_jaxprs(value: Any) -> Iterator[Any]:
    """The jaxprs held in one equation parameter (possibly a tuple)."""
    if isinstance(value, jax_core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jax_core.Jaxpr):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _sub_jaxprs(item)


def _walk(jaxpr, totals: dict[str, float], scale: float) -> None:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _COUNTERS:
            kind, counter = _COUNTERS[name]
            totals[kind] += scale * counter(eqn)
            continue
        if name == "cond":  # one branch runs: count the costliest
            best = None
            for branch in eqn.params["branches"]:
                sub = {"conv": 0.0, "dot": 0.0}
                _walk(branch.jaxpr, sub, scale)
                if best is None or sum(sub.values()) > sum(best.values()):
                    best = sub
            for kind, value in (best or {}).items():
                totals[kind] += value
            continue
        inner = scale * eqn.params.get("length", 1) if name == "scan" else scale
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                _walk(sub, totals, inner)


def count_flops(fn: Callable, *args) -> dict[str, float]:
    """FLOPs of one call of `fn(*args)`: {'conv', 'dot', 'total'}."""
    jaxpr = jax.make_jaxpr(fn)(*args)
    totals = {"conv": 0.0, "dot": 0.0}
    _walk(jaxpr.jaxpr, totals, 1.0)
    totals["total"] = totals["conv"] + totals["dot"]
    return totals


def xla_flops(compiled: jax.stages.Compiled) -> float | None:
    """XLA's own `cost_analysis()` FLOP estimate of a compiled program."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    return (
        float(analysis["flops"]) if analysis and "flops" in analysis else None
    )
