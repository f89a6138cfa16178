"""predict.py in-process against exported, and artifact sizes.

    python benchmarks/predict_bench.py [--images 24] [--reps 3] [--r50]

In one process, on the same images and checkpoint (configs/shapes.py at
its full size, freshly initialised weights saved as a checkpoint; score
threshold 0, so every image has all 20 detections to paste, encode and
draw, the most post-processing a shapes image can cost):
- `in_process`: `predict.py --workdir`'s predictor (model restored and
  jitted here); `exported`: `predict.py --exported`'s (artifact loaded by
  detector/predict/);
- per form: the start-up (restore + jit, or export + load), then
  `predict_files` over `--images` PNGs of assorted sizes, median of
  `--reps` runs after one warm-up, the two forms taking turns: images/s
  of the whole command (read, resize, predict, paste, RLE, overlay
  PNGs) and of the predict calls alone;
- artifact sizes: shapes for cpu and for cpu,cuda,tpu; with --r50 also
  configs/coco_r50_fpn.py (R50-FPN, 1024 x 1024, 80 classes).
Prints one JSON object (also written to --out).
"""

import json
import pathlib
import statistics
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from PIL import Image  # noqa: E402

from configs import coco_r50_fpn, shapes  # noqa: E402
from detector.export import exporter, in_process, serving  # noqa: E402
from detector.imaging import canvases  # noqa: E402
from detector.launch import cli, validate  # noqa: E402
from detector.predict import artifact, runner  # noqa: E402
from detector.state import checkpoint, optimizer, train_state  # noqa: E402

_IMAGES = flags.DEFINE_integer("images", 24, "Images per predict run.")
_REPS = flags.DEFINE_integer("reps", 5, "Timed runs after one warm-up.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "predict.py --batch_size.")
_R50 = flags.DEFINE_bool("r50", False, "Also size an R50-FPN artifact.")
_OUT = flags.DEFINE_string(
    "out", str(_REPO / "benchmarks/results/predict_bench.json"), "JSON out."
)
CHECKPOINT_STEP = 7


def shapes_config(root: pathlib.Path) -> ml_collections.ConfigDict:
    """configs/shapes.py, score threshold 0, categories of the generator."""
    config = shapes.get_config()
    config.data.root = str(root / "no_data")
    config.model.detection.score_threshold = 0.0
    cli.set_nms_backend(config, "auto")
    validate.validate(config)
    return config


def write_untrained_workdir(
    workdir: pathlib.Path, config: ml_collections.ConfigDict
) -> None:
    """config.json and checkpoint CHECKPOINT_STEP of fresh weights, laid
    out as train.py leaves a workdir."""
    workdir.mkdir(parents=True, exist_ok=True)
    _, params, rest = train_state.create_model(config, config.seed)
    tx, _ = optimizer.make_optimizer(config)
    state = train_state.init_state(params, rest, tx)
    state = state.replace(step=jnp.asarray(CHECKPOINT_STEP, jnp.int32))
    ckpt = checkpoint.Checkpointer(workdir / "checkpoints", max_to_keep=1)
    ckpt.save(CHECKPOINT_STEP, train_state.to_tree(state))
    ckpt.wait()
    ckpt.close()
    # As train_lib.save_config writes it (that module needs clu and TF).
    (workdir / "config.json").write_text(
        config.to_json_best_effort(indent=2, sort_keys=True) + "\n"
    )


def _write_images(folder: pathlib.Path, count: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(96, 320, 2))
        pixels = rng.integers(0, 256, (h, w, 3), np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:03d}.png")


def _time_forms(
    predictors: dict[str, runner.Predictor],
    images: pathlib.Path,
    out: pathlib.Path,
) -> dict[str, dict]:
    """Images/s of each form: one warm-up each, then --reps rounds that run
    the forms in turn (so load from other jobs falls on both alike)."""
    walls = {name: [] for name in predictors}
    calls = {name: [] for name in predictors}
    for round_ in range(_REPS.value + 1):
        for name, predictor in predictors.items():
            started = time.perf_counter()
            summary = runner.predict_files(  # every round predicts all
                predictor,
                [str(images)],
                out / name,
                batch_size=_BATCH.value,
                overwrite=True,
            )
            if round_:  # round 0 is the warm-up
                walls[name].append(time.perf_counter() - started)
                calls[name].append(summary["predict_seconds"])
    count = summary["images"]
    return {
        name: {
            "images_per_s": count / statistics.median(walls[name]),
            "predict_calls_images_per_s": count
            / statistics.median(calls[name]),
        }
        for name in predictors
    }


def _r50_sizes() -> dict:
    """Artifact bytes of R50-FPN (fresh weights) for cpu and cpu,cuda,tpu:
    one function per canvas of the 1x config, the weights once."""
    config = coco_r50_fpn.get_config()
    config.model.backbone_init = ""
    graphdef, params, rest = train_state.create_model(config, 0)
    graphdef = train_state.eval_graphdef(graphdef, params, rest)
    fn, weights = serving.weighted_fn(
        config,
        graphdef,
        jax.device_get(params),
        jax.device_get(rest),
        list(range(1, config.data.num_classes + 1)),
    )
    sizes = {}
    for platforms in (("cpu",), ("cpu", "cuda", "tpu")):
        sizes[",".join(platforms)] = len(
            exporter.serialize(
                fn, weights, canvases.canvases(config.data), platforms
            ).data
        )
    return sizes


def main(argv) -> None:
    del argv
    result = {
        "machine": f"{jax.devices()[0].device_kind}, JAX {jax.__version__}",
        "images": _IMAGES.value,
        "batch_size": _BATCH.value,
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        workdir = tmp / "run"
        config = shapes_config(tmp)
        write_untrained_workdir(workdir, config)
        _write_images(tmp / "images", _IMAGES.value)

        started = time.perf_counter()
        local = in_process.predictor(config, workdir)
        result["in_process"] = {"startup_s": time.perf_counter() - started}

        sizes = {}
        for platforms in (("cpu",), ("cpu", "cuda", "tpu")):
            started = time.perf_counter()
            meta = exporter.export_workdir(
                shapes_config(tmp), workdir, tmp / "export", platforms=platforms
            )
            export_s = time.perf_counter() - started
            sizes[",".join(platforms)] = (
                (tmp / "export" / artifact.ARTIFACT_FILE).stat().st_size
            )
        started = time.perf_counter()
        loaded = artifact.load(tmp / "export")
        result["exported"] = {
            "platforms": meta["platforms"],
            "export_s": export_s,
            "load_s": time.perf_counter() - started,
        }
        timed = _time_forms(
            {
                "in_process": local,
                "exported": runner.artifact_predictor(loaded),
            },
            tmp / "images",
            tmp / "out",
        )
        for name, numbers in timed.items():
            result[name] |= numbers
        result["artifact_bytes"] = {"shapes": sizes}
    if _R50.value:
        result["artifact_bytes"]["coco_r50_fpn"] = _r50_sizes()
    text = json.dumps(result, indent=2)
    print(text)
    pathlib.Path(_OUT.value).write_text(text + "\n")


if __name__ == "__main__":
    app.run(main)
