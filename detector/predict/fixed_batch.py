"""A Predictor that runs every batch at one size, so a folder of photos
compiles one program per canvas (predict.py)."""

import dataclasses
import sys
from typing import TextIO

import numpy as np

from detector.predict import runner

COMPILING = "compiling (first run only)"


def padded(
    predictor: runner.Predictor,
    batch_size: int,
    *,
    quiet: bool = False,
    stream: TextIO | None = None,
) -> runner.Predictor:
    """`predictor` running each batch at `batch_size` images: a last,
    smaller batch is padded with copies of its first image, whose outputs
    are dropped. Before the first batch of each canvas it prints COMPILING
    to `stream` (stdout; nothing when `quiet`): that canvas's program
    compiles then, or loads from the compilation cache."""
    seen = set()

    def run(batch, resized, sizes):
        canvas, count = tuple(batch.shape[1:3]), len(batch)
        if canvas not in seen:
            seen.add(canvas)
            if not quiet:
                print(COMPILING, file=stream or sys.stdout, flush=True)
        rows = [
            np.concatenate([a, np.repeat(a[:1], batch_size - count, axis=0)])
            for a in (batch, resized, sizes)
        ]
        outputs = predictor.run(*rows)
        return {name: value[:count] for name, value in outputs.items()}

    return dataclasses.replace(predictor, run=run)
