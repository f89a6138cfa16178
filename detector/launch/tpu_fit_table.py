"""Written by benchmarks/tpu_aot.py --fit --write_fit: the TPU compiler's
HBM use of each measured config's train step per chip kind, read by
tpu_fit.py (docs/tpu.md). Edit by running the benchmark again."""

import json

FITS: list[dict] = json.loads(
    """
[]
"""
)
