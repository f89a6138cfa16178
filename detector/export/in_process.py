"""predict.py --workdir: the exporter's served function restored and jitted
in this process, so its outputs are the artifact's (tests/detector/export/).
"""

import pathlib

import jax
import ml_collections

from detector.export import exporter
from detector.imaging import canvases
from detector.imaging import images as images_lib
from detector.predict import runner


def predictor(
    config: ml_collections.ConfigDict, workdir: pathlib.Path
) -> runner.Predictor:
    """A Predictor of the newest intact checkpoint of `workdir` (`config`
    validated by the caller: detector/launch/validate.py).

    Raises:
      ValueError / FileNotFoundError: unreadable categories or no intact
        checkpoint (one line).
    """
    model = exporter.served(config, workdir)
    fn = jax.jit(model.fn)  # compiled once per canvas
    weights = jax.device_put(model.weights)  # passed as the artifact's are
    return runner.Predictor(
        images_lib.Resize.of(config.data),
        canvases.canvases(config.data),
        model.categories,
        lambda images, resized, sizes: jax.device_get(
            fn(weights, images, resized, sizes)
        ),
        config.eval.mask_paste,
        f"workdir:{workdir.resolve()} step:{model.step} mask_paste:"
        f"{config.eval.mask_paste}",
    )
