"""A jax.profiler trace of the steps `config.train.profile_steps` names,
written into the workdir for TensorBoard's profile plugin or Perfetto
(docs/training.md)."""

import pathlib
from typing import Any

import jax
from absl import logging

FOLDER = "profile"


class ProfileWindow:
    """Starts the trace before step `first` and stops it once step `last`
    has finished; () traces nothing. A resume past `first` traces from its
    first step, one past `last` nothing."""

    def __init__(
        self,
        steps: tuple[int, ...],
        workdir: pathlib.Path,
        start_step: int,
    ):
        self.folder = workdir / FOLDER
        self._first, self._last = (
            (max(steps[0], start_step + 1), steps[1]) if steps else (0, -1)
        )
        self._tracing = False

    def before(self, step: int) -> None:
        """Called before step `step` is dispatched."""
        if step == self._first and self._first <= self._last:
            jax.profiler.start_trace(str(self.folder))
            self._tracing = True

    def after(self, step: int, outputs: Any) -> None:
        """Called after step `step` is dispatched, with its outputs."""
        if self._tracing and step == self._last:
            jax.block_until_ready(outputs)
            self.close()
            logging.info(
                "Profile of steps %d-%d written to %s (TensorBoard's "
                "profile plugin: tensorboard --logdir=%s; or Perfetto)",
                self._first,
                self._last,
                self.folder,
                self.folder,
            )

    def close(self) -> None:
        """Stops a trace in progress (a run that ends inside the window)."""
        if self._tracing:
            self._tracing = False
            jax.profiler.stop_trace()
