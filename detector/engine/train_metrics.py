"""Training metrics: metrics.jsonl (its fields: docs/training.md), TensorBoard,
the console line, and the stop on a non-finite loss, gradient or weight."""

import contextlib
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterator

import jax
from absl import logging
from clu import metric_writers
from jax.typing import ArrayLike

from detector.engine import console


def drop_lines_after(path: pathlib.Path, step: int) -> None:
    """Rewrites metrics file `path` without the lines of steps > `step`.

    A resumed run repeats the steps after its checkpoint; their earlier
    lines go, so each step is logged once. The file is replaced atomically
    (a temporary file renamed over it); a line that is not JSON (cut short
    by a kill) is dropped too.
    """
    if not path.exists():
        return
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            keep = json.loads(line)["step"] <= step
        except (ValueError, KeyError, TypeError):
            keep = False
        if keep:
            kept.append(line + "\n")
        else:
            dropped += 1
    if not dropped:
        return
    temp = path.with_name(path.name + ".tmp")
    temp.write_text("".join(kept))
    os.replace(temp, path)
    logging.info(
        "Resuming after step %d: dropped %d line(s) of later steps from %s",
        step,
        dropped,
        path,
    )


class MetricsLog:
    """Collects the times of a log window's steps and writes metrics lines
    and summaries.

    A window runs from one metrics line to the next. Its rates are wall
    clock: `images_per_sec` is the window's images over its wall time and
    `step_wall_ms` its wall time per step (what the ETA uses); beside them
    `step_time_ms` is the device time of one step (the log step, timed
    from the end of the steps before it, or its dispatch where they had
    ended, to its result),
    `data_wait_ms` the mean time a step waited for its batch and `host_ms`
    the mean time per step the loop spent neither waiting for a batch nor
    for the device. Time inside `paused()` (an evaluation) is in none of
    them.
    """

    def __init__(
        self,
        workdir: pathlib.Path,
        *,
        backend: str,
        host_roundtrips: int,
        images_per_step: int,
        deterministic: bool = False,
        resume_step: int = 0,
        num_steps: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """`resume_step`: the step the run starts after (its checkpoint);
        lines of later steps, written before the run stopped, are dropped.
        `num_steps`: the run's last step, for the console's progress and ETA
        (default: unknown, shown as the step alone). `clock`: seconds,
        monotonic (tests pass a fake one).
        """
        self.backend = backend
        self.deterministic = deterministic
        self.host_roundtrips = host_roundtrips
        self.images_per_step = images_per_step
        self._clock = clock
        self._window_step = resume_step
        self._window_start = clock()
        self._step_time = math.nan
        self._data_wait = 0.0
        self._device_wait = 0.0
        self._closed = False
        self._is_main = jax.process_index() == 0
        self.console = console.StepLine(num_steps)
        # TensorBoard only: clu's logging writer would repeat every field of
        # each step on the console.
        self.writer = metric_writers.AsyncMultiWriter(
            [metric_writers.SummaryWriter(str(workdir))]
            if self._is_main
            else []
        )
        if self._is_main:
            drop_lines_after(workdir / "metrics.jsonl", resume_step)
        self._jsonl = (
            open(workdir / "metrics.jsonl", "a")  # noqa: SIM115
            if self._is_main
            else None
        )

    def start_window(self) -> None:
        """Starts the first window now (after the compile)."""
        self._window_start = self._clock()

    def add_data_wait(self, seconds: float) -> None:
        """The time one step waited for its batch."""
        self._data_wait += seconds

    def add_device_wait(self, seconds: float) -> None:
        """Time the loop waited for the device (steps in flight)."""
        self._device_wait += seconds

    def set_step_time(self, seconds: float) -> None:
        """The device time of the window's timed step."""
        self._step_time = seconds

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside (an evaluation) counts in no rate or ETA."""
        started = self._clock()
        try:
            yield
        finally:
            self._window_start += self._clock() - started

    @staticmethod
    def check_finite(
        step: int,
        loss: ArrayLike,
        grad_norm: ArrayLike | None = None,
        state_finite: ArrayLike = True,
        *,
        last_checkpoint: int | None = None,
    ) -> None:
        """Stops the run on a NaN/Inf loss, gradient norm or weight.

        Called before the step's state is checkpointed: a non-finite gradient
        or update turns the weights into NaN/Inf while the loss of that step
        still looks finite. `last_checkpoint` is the newest saved step (None:
        nothing saved yet), which the message names.
        """
        loss = float(loss)
        stop = (
            "stopping; no checkpoint was saved before it"
            if last_checkpoint is None
            else f"stopping; checkpoint {last_checkpoint}, saved before it, "
            "is intact"
        )
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"total loss is {loss} at step {step}; {stop}"
            )
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            raise FloatingPointError(
                f"gradient norm is {float(grad_norm)} at step {step} (total "
                f"loss {loss:.4g}); {stop}"
            )
        if not bool(state_finite):
            raise FloatingPointError(
                f"the update of step {step} made weights non-finite (total "
                f"loss {loss:.4g}); {stop}"
            )

    def write(self, step: int, metrics: dict) -> dict:
        """Logs the window's metrics and starts a new window."""
        now = self._clock()
        steps = max(step - self._window_step, 1)
        wall = max(now - self._window_start, 1e-9)
        line = {"step": step}
        line.update({k: float(v) for k, v in metrics.items()})
        line.update(
            step_time_ms=self._step_time * 1e3,
            step_wall_ms=wall / steps * 1e3,
            data_wait_ms=self._data_wait / steps * 1e3,
            host_ms=max(wall - self._data_wait - self._device_wait, 0.0)
            / steps
            * 1e3,
            images_per_sec=self.images_per_step * steps / wall,
            nms_backend=self.backend,
            host_roundtrips_per_step=self.host_roundtrips,
            deterministic=self.deterministic,
        )
        self._window_step, self._window_start = step, now
        self._step_time, self._data_wait, self._device_wait = math.nan, 0, 0
        scalars = {
            k: v
            for k, v in line.items()
            if isinstance(v, float | int) and k != "step"
        }
        self.writer.write_scalars(step, scalars)
        self._append(line)
        logging.info("%s", self.console(line))
        return line

    def write_eval(self, step: int, results: dict) -> None:
        scalars = {
            f"eval/{task}/{name}": value
            for task in ("bbox", "segm")
            for name, value in results.get(task, {}).items()
        }
        self.writer.write_scalars(step, scalars)
        self._append(
            {
                "step": step,
                "eval": True,
                **{k: v for k, v in results.items() if k in ("bbox", "segm")},
            }
        )

    def _append(self, line: dict) -> None:
        if self._jsonl:
            self._jsonl.write(json.dumps(line) + "\n")
            self._jsonl.flush()

    def close(self) -> None:
        """Flushes and closes the writers and metrics.jsonl (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.writer.close()
        finally:
            if self._jsonl:
                self._jsonl.close()
