"""train.py's refusal of a batch that does not fit a TPU chip's HBM, from
a fit table, with a device kind given rather than attached."""

import types

import jax
import pytest

from configs import coco_r50_fpn
from detector.launch import tpu_fit, tpu_fit_table

KIND = "TPU v5 lite"


def _table(config, max_batch: int = 6) -> list[dict]:
    return [
        {
            "config": "coco_r50_fpn",
            "device_kind": KIND,
            "fixed_bytes": 2 * 2**30,
            "per_image_bytes": 2 * 2**30,
            "max_batch_per_chip": max_batch,
            "measured_batch": 8,
            "signature": tpu_fit.signature(config),
        }
    ]


def test_a_batch_over_the_chips_fit_is_one_line_naming_batch_and_chip():
    config = coco_r50_fpn.get_config()
    config.train.batch_size = 64  # 16 per chip on 4 chips
    with pytest.raises(ValueError) as e:
        tpu_fit.check_batch(config, KIND, 4, _table(config))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("config.train.batch_size=64 is 16 images per ")
    assert "4 TPU v5 lite chips (16 GiB HBM)" in message
    assert "at most 6 per chip" in message
    assert "--config.train.batch_size=24" in message


def test_a_batch_within_the_fit_passes():
    config = coco_r50_fpn.get_config()
    config.train.batch_size = 24
    tpu_fit.check_batch(config, KIND, 4, _table(config))


@pytest.mark.parametrize(
    "kind, change",
    [
        ("TPU v6 lite", None),  # no row for this chip
        (KIND, ("data", "image_size", (1024, 1024))),  # another program
    ],
)
def test_no_row_for_the_chip_or_the_config_checks_nothing(kind, change):
    config = coco_r50_fpn.get_config()
    table = _table(config, max_batch=1)
    if change:
        section, key, value = change
        config[section][key] = value
    config.train.batch_size = 64
    tpu_fit.check_batch(config, kind, 4, table)


def test_the_line_of_one_compile_counts_the_state_and_code_as_fixed():
    memory = {
        "argument_size_in_bytes": 1000 + 8 * 50,  # state, 8 images' batch
        "output_size_in_bytes": 1000,
        "alias_size_in_bytes": 1000,  # the donated state
        "temp_size_in_bytes": 8 * 300 + 100,
        "generated_code_size_in_bytes": 200,
    }
    assert tpu_fit.peak_bytes(memory) == 1400 + 2500 + 200
    fixed, per_image = tpu_fit.line(memory, batch_bytes=8 * 50, batch=8)
    assert fixed == 1200
    assert per_image == -(-(400 + 2500) // 8)  # the 100 counted as growing
    assert fixed + 8 * per_image >= tpu_fit.peak_bytes(memory)


def test_largest_batch_follows_the_line_under_the_headroom():
    usable = tpu_fit.usable_bytes(KIND)
    assert usable == int(0.9 * 16 * 2**30)
    assert tpu_fit.largest_batch(2**30, 2**30, KIND) == usable // 2**30 - 1
    assert tpu_fit.largest_batch(usable + 1, 1, KIND) == 0


def test_the_stored_rows_name_known_chips_and_fitting_batches():
    for row in tpu_fit.fits():
        assert row.device_kind in tpu_fit.HBM_GIB
        assert set(row.signature) == set(tpu_fit.SIGNATURE_KEYS)
        # The checking compile can only lower what the line allows.
        line = tpu_fit.largest_batch(
            row.fixed_bytes, row.per_image_bytes, row.device_kind
        )
        assert 0 <= row.max_batch_per_chip <= max(line, 2)


def test_check_reads_the_attached_chips_kind_and_count(monkeypatch):
    """train.py's call: the devices are TPUs of KIND (faked), 8 of them."""
    config = coco_r50_fpn.get_config()
    monkeypatch.setattr(tpu_fit_table, "FITS", _table(config, max_batch=2))
    chip = types.SimpleNamespace(platform="tpu", device_kind=KIND)
    monkeypatch.setattr(jax, "devices", lambda: [chip] * 8)
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    config.train.batch_size = 16
    tpu_fit.check(config)
    config.train.batch_size = 24
    with pytest.raises(ValueError, match=r"is 3 images per chip on 8 TPU v5"):
        tpu_fit.check(config)
