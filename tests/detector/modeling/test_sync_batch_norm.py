"""Cross-replica BatchNorm: 2 devices and 2 processes normalise as one
device does with the whole batch (tests/helpers/sync_bn_probe.py).

The probe runs a 'sync_batch' backbone, FPN and 4conv1fc box head (whose
last replica holds only padding rois) in the train step's shard_map and
on one device; the same loss, gradients and running statistics within
float32 reduction-order error (1e-5 relative, CPU), and 'batch' (per-device
statistics) fails the same comparison.
"""

import json

import pytest

from tests.helpers import processes

PROBE = ["-m", "tests.helpers.sync_bn_probe"]
TOLERANCE = 1e-5  # float32 sums in another order (CPU)


def _probe(tmp_path, norm: str) -> dict:
    out = tmp_path / f"{norm}.json"
    results = processes.run(
        [
            (
                [*PROBE, f"--out={out}", f"--norm={norm}"],
                processes.env(devices=2),
            )
        ],
        tmp_path / f"logs_{norm}",
    )
    assert results[0][0] == 0, results[0][1][-3000:]
    return json.loads(out.read_text())


def _assert_same(result: dict) -> None:
    assert result["loss"] == pytest.approx(
        result["reference_loss"], rel=TOLERANCE
    )
    assert result["grads"] < TOLERANCE
    assert result["statistics"] < TOLERANCE
    assert result["statistics_finite"] and result["head_mean_moved"] > 0


@pytest.mark.slow  # two subprocesses, two compiles each: ~100 s on 2 cores
def test_two_devices_normalise_as_one_device_with_the_whole_batch(tmp_path):
    result = _probe(tmp_path, "sync_batch")
    assert (result["devices"], result["processes"]) == (2, 1)
    _assert_same(result)
    per_device = _probe(tmp_path, "batch")
    with pytest.raises(AssertionError):
        _assert_same(per_device)


@pytest.mark.slow  # two processes, two compiles each: ~80 s on 2 cores
def test_two_processes_normalise_as_one_device_with_the_whole_batch(
    tmp_path,
):
    out = tmp_path / "result.json"
    commands = processes.two_processes(PROBE[0], [PROBE[1], f"--out={out}"])
    for code, output in processes.run(commands, tmp_path / "logs"):
        assert code == 0, output[-3000:]
    result = json.loads(out.read_text())
    assert (result["devices"], result["processes"]) == (2, 2)
    _assert_same(result)
