"""detector/engine/console.py: the one console line per log step."""

import math

import pytest

from detector.engine import console

LINE = {
    "step": 40,
    "total": 2.59691,
    "rpn_cls": 0.62171,
    "rpn_box": 0.01349,
    "cls": 1.11313,
    "box": 0.15617,
    "mask": 0.69241,
    "learning_rate": 0.01,
    "grad_norm": 10.03,
    "step_time_ms": 497.04,
    "step_wall_ms": 502.14,
    "data_wait_ms": 0.12,
    "host_ms": 2.03,
    "images_per_sec": 15.93,
    "nms_backend": "pallas",
    "host_roundtrips_per_step": 0,
    "deterministic": False,
}


def test_line_has_progress_eta_losses_speed_lr_nms_and_memory():
    line = console.StepLine(1800, memory=lambda: int(3.21 * 2**30))
    # 1760 steps left at the window's wall 502.14 ms/step: 883.8 s.
    assert line(LINE) == (
        "step 40/1800 (2%)  eta 0:14:44  total 2.5969  rpn_cls 0.6217  "
        "rpn_box 0.0135  cls 1.1131  box 0.1562  mask 0.6924 | "
        "502.1 ms/step  15.9 img/s  device 497.0 ms  data 0.1 ms  "
        "host 2.0 ms  lr 1.00e-02  nms pallas  mem 3.21 GiB"
    )


def test_eta_is_the_steps_left_at_the_wall_rate_and_ends_at_zero():
    line = console.StepLine(100, memory=lambda: None)
    assert line.eta_seconds(50, 1000.0) == pytest.approx(50.0)
    assert line.eta_seconds(75, 200.0) == pytest.approx(5.0)
    assert line.eta_seconds(100, 200.0) == 0.0
    assert math.isnan(console.StepLine(None).eta_seconds(5, 200.0))


def test_memory_is_left_out_where_the_platform_reports_none():
    text = console.StepLine(1800, memory=lambda: None)(LINE)
    assert "mem" not in text and text.endswith("nms pallas")


def test_unknown_total_shows_the_step_alone():
    text = console.StepLine(None, memory=lambda: None)(LINE)
    assert text.startswith("step 40  total 2.5969") and "eta" not in text


class _Device:
    def __init__(self, stats):
        self._stats = stats

    def memory_stats(self):
        if isinstance(self._stats, Exception):
            raise self._stats
        return self._stats


def test_peak_memory_is_the_busiest_device_or_none():
    devices = [
        _Device({"peak_bytes_in_use": 5 * 2**20, "bytes_in_use": 1}),
        _Device({"peak_bytes_in_use": 7 * 2**20}),
        _Device(None),  # CPU
        _Device({"bytes_in_use": 9 * 2**20}),  # no peak reported
        _Device(NotImplementedError()),
    ]
    assert console.peak_memory_bytes(devices) == 7 * 2**20
    assert console.peak_memory_bytes(devices[2:]) is None


@pytest.mark.parametrize(
    "count,text",
    [(512 * 2**20, "512 MiB"), (int(3.214 * 2**30), "3.21 GiB")],
)
def test_format_bytes(count, text):
    assert console.format_bytes(count) == text


@pytest.mark.parametrize(
    "seconds,text",
    [(880.4, "0:14:40"), (93784, "1 day, 2:03:04"), (math.nan, "?")],
)
def test_format_eta(seconds, text):
    assert console.format_eta(seconds) == text
