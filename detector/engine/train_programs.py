"""The train step compiled and audited once per canvas before step 1
(`inference.programs`); each step runs the program of its batch's canvas
(docs/training.md)."""

from typing import Any

import jax

from detector.imaging.canvases import Canvas
from detector.inference import programs as programs_lib
from ops import host_audit


class TrainPrograms(programs_lib.Programs):
    """(state, batch, key) -> (state, metrics) by the program of the
    batch's canvas."""

    def __call__(self, state: Any, batch: dict[str, jax.Array], key: jax.Array):
        canvas = programs_lib.canvas_of(batch["image"])
        return self.run(canvas, state, batch, key)


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
    """`programs.compile_per_canvas` of the train step: the first batch's
    canvas first, then each other of `canvases`.

    Raises:
      host_audit.HostRoundTripError: `strict` and a program has one.
    """
    first = programs_lib.canvas_of(batch["image"])
    programs, findings = programs_lib.compile_per_canvas(
        jitted,
        lambda canvas: (
            state,
            batch if canvas == first else _on_canvas(batch, canvas),
            key,
        ),
        (first, *canvases),
        name=name,
        strict=strict,
        advice=advice,
    )
    return TrainPrograms(programs.programs, programs.name), findings
