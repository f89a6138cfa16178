"""predict.py --workdir: the model restored and jitted in this process.

The same function the exporter serializes (`serving.serving_fn`), with the
same weights closed over, so on one platform its outputs are those of the
exported artifact (tests/detector/export/).
"""

import pathlib

import jax
import ml_collections

from detector.export import exporter, serving
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
    fn = jax.jit(model.fn)
    return runner.Predictor(
        serving.resize_of(config),
        model.categories,
        lambda images, resized, sizes: jax.device_get(
            fn(images, resized, sizes)
        ),
        config.eval.mask_paste,
    )
