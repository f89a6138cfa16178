"""MetricsLog's rates: wall clock over the window between metrics lines,
beside the device, data and host times (docs/training.md)."""

import json

import pytest

from tests.helpers import requires

requires.module_or_skip("clu")  # the TensorBoard writer


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _log(tmp_path, clock, resume_step=0):
    from detector.engine import train_metrics  # imports clu

    return train_metrics.MetricsLog(
        tmp_path,
        backend="pallas",
        host_roundtrips=0,
        images_per_step=8,
        resume_step=resume_step,
        num_steps=100,
        clock=clock,
    )


def test_rates_are_wall_clock_over_the_window_beside_device_data_host(
    tmp_path,
):
    clock = _Clock()
    log = _log(tmp_path, clock, resume_step=10)
    clock.now += 30.0  # the compile: not in the first window
    log.start_window()
    for _ in range(10):  # steps 11..20, 0.5 s each on the wall clock
        log.add_data_wait(0.01)
        clock.now += 0.5
    log.add_device_wait(4.0)
    log.set_step_time(0.45)
    with log.paused():  # an evaluation
        clock.now += 60.0
    try:
        line = log.write(20, {"total": 1.5})
    finally:
        log.close()
    assert line["step_wall_ms"] == pytest.approx(500.0)
    assert line["images_per_sec"] == pytest.approx(16.0)  # 80 images / 5 s
    assert line["step_time_ms"] == pytest.approx(450.0)
    assert line["data_wait_ms"] == pytest.approx(10.0)
    # 5 s of wall, 0.1 s waiting for batches, 4 s for the device.
    assert line["host_ms"] == pytest.approx(90.0)
    written = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert written == line


def test_each_window_starts_where_the_last_line_ended(tmp_path):
    clock = _Clock()
    log = _log(tmp_path, clock)
    try:
        clock.now += 2.0
        first = log.write(2, {"total": 1.0})
        clock.now += 6.0
        second = log.write(5, {"total": 1.0})
    finally:
        log.close()
    assert first["step_wall_ms"] == pytest.approx(1000.0)
    assert second["step_wall_ms"] == pytest.approx(2000.0)
    assert second["images_per_sec"] == pytest.approx(4.0)
    assert second["data_wait_ms"] == 0.0
