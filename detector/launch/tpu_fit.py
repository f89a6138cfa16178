"""Whether a training batch fits a TPU chip's HBM, from the TPU compiler's
memory analysis (benchmarks/tpu_aot.py --fit writes the numbers into
tpu_fit_table.py; docs/tpu.md), so that train.py refuses a batch that
cannot fit before it compiles anything.

The rule: a chip holds a train step whose peak HBM (`peak_bytes`:
arguments, outputs not aliased to donated arguments, temporaries and code,
as `memory_analysis` reports the compiled per-chip program) is at most
HEADROOM of its HBM; the rest is left to the runtime, the input batch
prefetched onto the device and fragmentation. The peak is taken as a line
in the batch per chip b, fixed + per_image x b, from one compile at a batch
b0: fixed is the state (the arguments but the batch) and the code, and
every other byte (the batch, the temporaries) is counted as growing with
b. Temporaries that do not grow make the line steeper than the truth, so
the largest batch it allows is a lower bound for b > b0.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import ml_collections

from detector import config as config_lib
from detector.imaging import canvases
from detector.launch import tpu_fit_table

# HBM per chip by device kind (Cloud TPU's system architecture pages).
HBM_GIB = {
    "TPU v4": 32,
    "TPU v5 lite": 16,  # v5e
    "TPU v5": 95,  # v5p
    "TPU v5p": 95,
    "TPU v6 lite": 32,  # v6e (Trillium)
}
HEADROOM = 0.9
# The config fields the train step's memory depends on beside the batch;
# a table row applies to a config only where all of them are equal.
SIGNATURE_KEYS = (
    "data.image_size",
    "data.train_image_size",
    "data.group_orientations",
    "data.max_instances",
    "data.gt_mask_size",
    "model.backbone",
    "model.norm",
    "model.fpn_norm",
    "model.dtype",
    "model.loss.mask_target",
)


@dataclasses.dataclass(frozen=True)
class Fit:
    """One row: a config's train step on one chip kind."""

    config: str  # the config it was measured for, e.g. 'coco_r50_fpn'
    device_kind: str
    fixed_bytes: int  # peak HBM at batch 0 per chip (the line's intercept)
    per_image_bytes: int
    max_batch_per_chip: int  # largest_batch of the line
    measured_batch: int  # the batch per chip of the compile
    signature: Mapping[str, Any]
    versions: str = ""  # JAX and libtpu that compiled it


def peak_bytes(memory: Mapping[str, int]) -> int:
    """Peak HBM of one chip from `memory_analysis` fields (bytes)."""
    return (
        memory["argument_size_in_bytes"]
        + memory["output_size_in_bytes"]
        - memory["alias_size_in_bytes"]
        + memory["temp_size_in_bytes"]
        + memory["generated_code_size_in_bytes"]
    )


def line(
    memory: Mapping[str, int], batch_bytes: int, batch: int
) -> tuple[int, int]:
    """(fixed, per_image) of the rule's line from one compile.

    Args:
      memory: the compiled train step's `memory_analysis` fields.
      batch_bytes: the bytes of one chip's share of the batch arguments.
      batch: the images per chip it was compiled for.
    """
    fixed = (
        memory["argument_size_in_bytes"]
        - batch_bytes
        + memory["generated_code_size_in_bytes"]
    )
    return fixed, -(-(peak_bytes(memory) - fixed) // batch)


def usable_bytes(device_kind: str) -> int:
    """HEADROOM of the HBM of one chip of `device_kind`.

    Raises:
      KeyError: a kind HBM_GIB does not know.
    """
    return int(HEADROOM * HBM_GIB[device_kind] * 2**30)


def largest_batch(fixed: int, per_image: int, device_kind: str) -> int:
    """The largest batch per chip the line fixed + per_image x b allows."""
    return max(0, (usable_bytes(device_kind) - fixed) // max(per_image, 1))


def _field(config: ml_collections.ConfigDict, dotted: str) -> Any:
    value = config
    for part in dotted.split("."):
        value = value.get(part) if hasattr(value, "get") else None
    return list(value) if isinstance(value, tuple) else value


def signature(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The SIGNATURE_KEYS values of `config` (tuples as lists; the dtype as
    'auto' resolves on TPU)."""
    sig = {key: _field(config, key) for key in SIGNATURE_KEYS}
    sig["model.dtype"] = str(
        config_lib.resolve_dtype(sig["model.dtype"], "tpu")
    )
    return sig


def fits(
    table: list[dict] | None = None,
) -> list[Fit]:
    """The rows of `table` (default tpu_fit_table.FITS)."""
    rows = tpu_fit_table.FITS if table is None else table
    return [Fit(**row) for row in rows]


def row_for(
    config: ml_collections.ConfigDict,
    device_kind: str,
    table: list[dict] | None = None,
) -> Fit | None:
    """The row measured for `config`'s train step on `device_kind`."""
    sig = signature(config)
    for row in fits(table):
        if row.device_kind == device_kind and dict(row.signature) == sig:
            return row
    return None


def check_batch(
    config: ml_collections.ConfigDict,
    device_kind: str,
    device_count: int,
    table: list[dict] | None = None,
) -> None:
    """Refuses a train.batch_size whose share per chip exceeds the largest
    the table gives for this config on `device_kind` (none: no check).

    Raises:
      ValueError: one line naming the batch, the chip and the largest.
    """
    row = row_for(config, device_kind, table)
    per_chip = config.train.batch_size // max(device_count, 1)
    if row is None or per_chip <= row.max_batch_per_chip:
        return
    canvas = " and ".join(f"{h}x{w}" for h, w in canvases.training(config.data))
    raise ValueError(
        f"config.train.batch_size={config.train.batch_size} is {per_chip} "
        f"images per chip on {device_count} {device_kind} chips "
        f"({HBM_GIB[device_kind]} GiB HBM): the train step on {canvas} fits "
        f"at most {row.max_batch_per_chip} per chip (docs/tpu.md); use "
        f"--config.train.batch_size="
        f"{row.max_batch_per_chip * device_count} or more chips"
    )


def check(config: ml_collections.ConfigDict) -> None:
    """check_batch for this process's devices, where they are TPUs."""
    device = jax.devices()[0]
    if device.platform == "tpu":
        check_batch(config, device.device_kind, jax.device_count())
