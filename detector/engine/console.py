"""The one console line a training run prints per log step: a summary of the
step's metrics.jsonl line, as detectron2's CommonMetricPrinter prints it."""

import datetime
import math
from collections.abc import Callable, Mapping, Sequence

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
    """Formats the console line of each logged step, with its ETA.

      step 40/1800 (2%)  eta 0:14:41  total 2.5969  rpn_cls 0.6217 ...
      | 502.1 ms/step  15.9 img/s  device 497.0 ms  data 0.1 ms
      host 2.0 ms  lr 1.00e-02  nms pallas  mem 3.21 GiB

    `ms/step` and `img/s` are wall clock over the window since the last
    line (train_metrics.MetricsLog), and the ETA is the steps left at that
    rate; `device` is one step's device time, `data` and `host` the time per
    step the loop waited for batches and spent on its own work. `mem` is the
    busiest local device's peak memory, left out where the platform reports
    none (CPU).

    Args:
      num_steps: the run's last step (None: unknown; no total, no ETA).
      memory: returns the peak device memory in bytes or None (default:
        `peak_memory_bytes` of the local devices).
    """

    def __init__(
        self,
        num_steps: int | None,
        *,
        memory: Callable[[], int | None] = peak_memory_bytes,
    ):
        self.num_steps = num_steps
        self._memory = memory

    def eta_seconds(self, step: int, step_wall_ms: float) -> float:
        """Seconds left after `step` at `step_wall_ms` a step."""
        if self.num_steps is None:
            return math.nan
        left = max(self.num_steps - step, 0)
        return left * step_wall_ms / 1e3 if left else 0.0

    def __call__(self, line: Mapping) -> str:
        """The console line for metrics line `line` (train_metrics.write)."""
        step = int(line["step"])
        eta = self.eta_seconds(step, line["step_wall_ms"])
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
            f"{line['step_wall_ms']:.1f} ms/step",
            f"{line['images_per_sec']:.1f} img/s",
            f"device {line['step_time_ms']:.1f} ms",
            f"data {line['data_wait_ms']:.1f} ms",
            f"host {line['host_ms']:.1f} ms",
        ]
        if "learning_rate" in line:
            speed.append(f"lr {line['learning_rate']:.2e}")
        speed.append(f"nms {line['nms_backend']}")
        peak = self._memory()
        if peak is not None:
            speed.append(f"mem {format_bytes(peak)}")
        return "  ".join(parts) + " | " + "  ".join(speed)
