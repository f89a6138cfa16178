"""The one console line a training run prints per log step: a summary of the
step's metrics.jsonl line, as detectron2's CommonMetricPrinter prints it."""

import contextlib
import datetime
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import jax

from detector.modeling import losses


def peak_memory_bytes(
    devices: Sequence[jax.Device] | None = None,
) -> int | None:
    """The highest 'peak_bytes_in_use' of `devices` (default: the local
    ones), or None where none of them reports memory statistics."""
    peaks = []
    for device in jax.local_devices() if devices is None else devices:
        try:
            stats = device.memory_stats()
        except (NotImplementedError, RuntimeError):  # platform without stats
            stats = None
        if stats and "peak_bytes_in_use" in stats:
            peaks.append(int(stats["peak_bytes_in_use"]))
    return max(peaks) if peaks else None


def format_bytes(count: int) -> str:
    """'512 MiB', '3.21 GiB'."""
    if count < 2**30:
        return f"{count / 2**20:.0f} MiB"
    return f"{count / 2**30:.2f} GiB"


def format_eta(seconds: float) -> str:
    """'0:14:41'; '1 day, 2:03:04' past a day; '?' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    return str(datetime.timedelta(seconds=round(seconds)))


class StepLine:
    """Formats the console line of each logged step, tracking the ETA.

      step 40/1800 (2%)  eta 0:14:41  total 2.5969  rpn_cls 0.6217 ...
      | 502.1 ms/step  15.9 img/s  data 5.0 ms  lr 1.00e-02  nms pallas
      mem 3.21 GiB

    The ETA is the steps left times the wall-clock time per step of the
    last window (evaluations, run inside `paused()`, left out, as
    detectron2 does); `mem` is the busiest local device's peak memory,
    left out where the platform reports none (CPU).

    Args:
      num_steps: the run's last step (None: unknown; no total, no ETA).
      start_step: the step the run starts after (0, or the restored one).
      memory: returns the peak device memory in bytes or None (default:
        `peak_memory_bytes` of the local devices).
      clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        num_steps: int | None,
        start_step: int = 0,
        *,
        memory: Callable[[], int | None] = peak_memory_bytes,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.num_steps = num_steps
        self._memory = memory
        self._clock = clock
        self._last_step = start_step
        self._last_time = clock()

    def eta_seconds(self, step: int) -> float:
        """Seconds left after `step`, from the time per step since the last
        call; starts a new window."""
        now = self._clock()
        done = step - self._last_step
        per_step = (now - self._last_time) / done if done > 0 else math.nan
        self._last_step, self._last_time = step, now
        if self.num_steps is None:
            return math.nan
        left = max(self.num_steps - step, 0)
        return left * per_step if left else 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside (an evaluation) does not count toward the
        time per step of the window it falls in."""
        started = self._clock()
        try:
            yield
        finally:
            self._last_time += self._clock() - started

    def __call__(self, line: Mapping) -> str:
        """The console line for metrics line `line` (train_metrics.write)."""
        step = int(line["step"])
        eta = self.eta_seconds(step)
        parts = (
            [f"step {step}"]
            if self.num_steps is None
            else [
                f"step {step}/{self.num_steps} "
                f"({100 * step / self.num_steps:.0f}%)",
                f"eta {format_eta(eta)}",
            ]
        )
        parts += [
            f"total {line['total']:.4f}",
            *(
                f"{name} {line[name]:.4f}"
                for name in losses.TERM_NAMES
                if name in line
            ),
        ]
        speed = [
            f"{line['step_time_ms']:.1f} ms/step",
            f"{line['images_per_sec']:.1f} img/s",
            f"data {line['data_wait_ms']:.1f} ms",
        ]
        if "learning_rate" in line:
            speed.append(f"lr {line['learning_rate']:.2e}")
        speed.append(f"nms {line['nms_backend']}")
        peak = self._memory()
        if peak is not None:
            speed.append(f"mem {format_bytes(peak)}")
        return "  ".join(parts) + " | " + "  ".join(speed)
