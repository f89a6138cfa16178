"""Programs compiled and audited once per canvas before their first call,
each call run by the program of its images' canvas: the train step's and
the inference function's (docs/architecture.md, "Resizing, canvases and
image sizes")."""

from collections.abc import Callable
from typing import Any

import jax

from detector.imaging.canvases import Canvas
from ops import host_audit


def canvas_of(images: Any) -> Canvas:
    """The (H, W) of images [B, H, W, C] (an array or its shape struct)."""
    _, height, width, _ = images.shape
    return int(height), int(width)


def canvas_name(canvas: Canvas) -> str:
    """'HxW'."""
    return f"{canvas[0]}x{canvas[1]}"


class Programs:
    """A compiled program per canvas; `run(canvas, *args)` calls the one of
    `canvas`."""

    def __init__(self, programs: dict[Canvas, Any], name: str):
        self.programs = programs
        self.name = name

    def run(self, canvas: Canvas, *args: Any) -> Any:
        """The program of `canvas` called on `args`.

        Raises:
          ValueError: no program of that canvas (one line, naming those
            compiled).
        """
        program = self.programs.get(tuple(canvas))
        if program is None:
            raise ValueError(
                f"images on {canvas_name(canvas)} have no compiled "
                f"{self.name} (canvases: "
                f"{', '.join(map(canvas_name, self.programs))})"
            )
        return program(*args)


def compile_per_canvas(
    jitted: jax.stages.Wrapped,
    args_on: Callable[[Canvas], tuple],
    canvases: tuple[Canvas, ...],
    *,
    name: str,
    strict: bool,
    advice: host_audit.Advice | None,
) -> tuple[Programs, list[host_audit.HostRoundTrip]]:
    """Compiles and audits `jitted` on `args_on(canvas)` for each canvas of
    `canvases`, in order, each once; the audit's log names the program
    `name`, or `<name> on HxW` where there are several.

    Returns:
      (programs, the host round-trips of the program with the most).

    Raises:
      host_audit.HostRoundTripError: `strict` and a program has one.
    """
    order = list(dict.fromkeys(map(tuple, canvases)))
    programs, findings = {}, []
    for canvas in order:
        programs[canvas], found = host_audit.compile_audited(
            jitted,
            *args_on(canvas),
            program=(
                name if len(order) == 1 else f"{name} on {canvas_name(canvas)}"
            ),
            strict=strict,
            advice=advice,
        )
        findings = max(findings, found, key=len)
    return Programs(programs, name), findings
