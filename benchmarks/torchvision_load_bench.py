"""Load time of a full torchvision Mask R-CNN R50-FPN file, both formats.

    python benchmarks/torchvision_load_bench.py [--reps 5]

Writes a `maskrcnn_resnet50_fpn` (v1) state dict with torchvision's names
and shapes (44.4M values, 170 MiB; random values, written by
tests/detector/weights/make_torchvision_fixture.py in a child process, as
torchvision must not share a process with TensorFlow), saves it as
.safetensors and as .pth, and times, as medians over `--reps` after one
warm-up each (the file is in the page cache by then):
- `read_ms`: weight_files.read alone (read, prefix strip, value checks);
- `load_ms`: torchvision_maskrcnn.load (read plus the mapping onto
  configs/coco_r50_fpn.py:torchvision's variables, 80 classes);
- `apply_ms`: warm_start.apply, what a run does at its start (load plus
  replacing the fresh parameters).
Reading .pth needs torch in this process (`pip install -e '.[torch]'`).
Prints one JSON object (also written to --out).
"""

import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from flax import nnx  # noqa: E402

from configs import coco_r50_fpn  # noqa: E402
from detector import factory  # noqa: E402
from detector.state import warm_start  # noqa: E402
from detector.weights import (  # noqa: E402
    torchvision_maskrcnn,
    weight_files,
)

_REPS = flags.DEFINE_integer("reps", 5, "Timed repetitions per quantity.")
_OUT = flags.DEFINE_string(
    "out", "benchmarks/out/torchvision_load_bench.json", "Output JSON."
)
_SCRIPT = _REPO / "tests/detector/weights/make_torchvision_fixture.py"


def _write_files(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """The full-width state dict as .safetensors and .pth."""
    out = folder / "maskrcnn_resnet50_fpn"
    subprocess.run(
        [sys.executable, str(_SCRIPT), f"--out={out}", "--width=full"]
        + ["--size=64", "--threads=2"],
        check=True,
    )
    safetensors = out.with_suffix(".safetensors")
    pth = out.with_suffix(".pth")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, torch; from safetensors.torch import load_file; "
            "torch.save(load_file(sys.argv[1]), sys.argv[2])",
            str(safetensors),
            str(pth),
        ],
        check=True,
    )
    return {".safetensors": safetensors, ".pth": pth}


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv: list[str]) -> None:
    del argv
    config = coco_r50_fpn.get_config("torchvision")
    config.model.dtype = "float32"
    abstract = nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )
    _, params, rest = nnx.split(abstract, nnx.Param, ...)
    params, rest = jax.tree.map(
        lambda x: np.zeros(x.shape, x.dtype), (params, rest)
    )
    shapes = {
        name: tuple(leaf.shape)
        for name, leaf in {
            **warm_start.flat(params),
            **warm_start.flat(rest),
        }.items()
    }
    results = {"reps": _REPS.value}
    with tempfile.TemporaryDirectory() as tmp:
        for suffix, path in _write_files(pathlib.Path(tmp)).items():
            config.model.init_checkpoint = str(path)
            row = {
                "file_mib": path.stat().st_size / 2**20,
                "read_ms": _median_ms(
                    lambda p=path: weight_files.read(p, "bench"), _REPS.value
                ),
                "load_ms": _median_ms(
                    lambda p=path: torchvision_maskrcnn.load(p, config, shapes),
                    _REPS.value,
                ),
                "apply_ms": _median_ms(
                    lambda: warm_start.apply(config, params, rest), _REPS.value
                ),
            }
            results[suffix] = {k: round(v, 1) for k, v in row.items()}
    print(json.dumps(results, indent=1))
    out = pathlib.Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    app.run(main)
