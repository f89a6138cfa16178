"""The train step compiled and audited once per canvas before step 1; each
step runs the program of its batch's canvas (docs/training.md)."""

from typing import Any

import jax

from detector.imaging.canvases import Canvas
from ops import host_audit


def canvas_of(batch: dict[str, Any]) -> Canvas:
    """The (H, W) of a batch's images."""
    _, height, width, _ = batch["image"].shape
    return int(height), int(width)


class TrainPrograms:
    """(state, batch, key) -> (state, metrics) by the program of the
    batch's canvas."""

    def __init__(self, programs: dict[Canvas, jax.stages.Compiled]):
        self.programs = programs

    def __call__(self, state: Any, batch: dict[str, jax.Array], key: jax.Array):
        canvas = canvas_of(batch)
        program = self.programs.get(canvas)
        if program is None:
            raise ValueError(
                f"a training batch on {canvas[0]}x{canvas[1]} has no compiled "
                f"train step (canvases: {', '.join(map(_name, self.programs))})"
            )
        return program(state, batch, key)


def _name(canvas: Canvas) -> str:
    return f"{canvas[0]}x{canvas[1]}"


def _on_canvas(batch: dict[str, jax.Array], canvas: Canvas) -> dict[str, Any]:
    """`batch` with its image an abstract array on `canvas`, same sharding."""
    image = batch["image"]
    spec = jax.ShapeDtypeStruct(
        (image.shape[0], *canvas, image.shape[-1]),
        image.dtype,
        sharding=image.sharding,
    )
    return {**batch, "image": spec}


def compile_per_canvas(
    jitted: jax.stages.Wrapped,
    state: Any,
    batch: dict[str, jax.Array],
    key: jax.Array,
    canvases: tuple[Canvas, ...],
    *,
    strict: bool,
    advice: host_audit.Advice | None,
    name: str = "train_step",
) -> tuple[TrainPrograms, list[host_audit.HostRoundTrip]]:
    """Compiles and audits `jitted` for the first batch's canvas, then for
    each other of `canvases`; `name` is the program's in the audit's log.

    Returns:
      (programs, the host round-trips of the program with the most).

    Raises:
      host_audit.HostRoundTripError: `strict` and a program has one.
    """
    first = canvas_of(batch)
    order = [first, *(c for c in map(tuple, canvases) if c != first)]
    programs, findings = {}, []
    for canvas in order:
        compiled, found = host_audit.compile_audited(
            jitted,
            state,
            batch if canvas == first else _on_canvas(batch, canvas),
            key,
            program=(name if len(order) == 1 else f"{name} on {_name(canvas)}"),
            strict=strict,
            advice=advice,
        )
        programs[canvas] = compiled
        findings = max(findings, found, key=len)
    return TrainPrograms(programs), findings
