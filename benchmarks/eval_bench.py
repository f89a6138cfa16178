"""Host work of evaluation and prediction, apart from the device.

    python benchmarks/eval_bench.py                   # host parts + whole run
    python benchmarks/eval_bench.py --parts=host      # per-image host work
    python benchmarks/eval_bench.py --parts=whole     # eval.py and predict.py

- `host`: ms per image on synthetic 640 x 480 and 480 x 640 images with
  COCO-like boxes (41% small: side 4-32 px, 34% medium: 32-96, 25% large:
  96-400; aspect 1:2 to 2:1; centres anywhere, so some run over the edge)
  and smooth 28 x 28 masks, at 100, 50 and 10 detections: pasting (both
  rules), RLE encoding and both together, with the previous float64
  implementation (tests/detector/imaging/reference_masks.py) beside them;
  then COCOeval, bbox and segm apart, per backend, on `--coco_images`
  images with 7 ground-truth objects each (COCO's mean). On one core (a
  child process pinned to one CPU with one BLAS thread; its CPU time, so
  that other jobs on a shared machine do not count) and on all cores (wall
  time; one thread per core, each pasting and encoding its own images;
  COCOeval with its own threads).
- `whole`: an untrained shapes model (configs/shapes.py, 128 x 128 input,
  score threshold 0 and 100 detections, so every image has 100 masks to
  paste at 640 x 480) evaluated by `eval_lib.evaluate` on the first
  `--eval_images` of input_bench.py's 640 x 480 JPEG folder: the device's
  predict time against the whole predict loop and the COCOeval, JSON and
  drawing after it; then `predict_files` (predict.py --workdir) on the same
  JPEGs, images/s (the whole command: read, resize, predict, paste, RLE,
  overlays; and the predict calls alone). This part uses no newer API, so
  it runs on an older checkout as well, which gives the previous figures.

Prints one JSON object, also written to --result.
"""

import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from absl import app, flags  # noqa: E402

# Named apart from predict_bench.py's flags, which it imports.
_PARTS = flags.DEFINE_list("parts", ["host", "whole"], "host and/or whole.")
_CORES = flags.DEFINE_integer(
    "cores", 0, "0: all cores; 1: pinned to one (the child process)."
)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds (median) per row.")
_HOST_IMAGES = flags.DEFINE_integer("host_images", 8, "Images per round.")
_COCO_IMAGES = flags.DEFINE_integer("coco_images", 20, "Images COCOeval'd.")
_EVAL_IMAGES = flags.DEFINE_integer("eval_images", 64, "JPEGs evaluated.")
_JPEGS = flags.DEFINE_string(
    "jpegs", "data/shapes_jpeg", "input_bench.py's 640x480 JPEG folder."
)
_JPEG_COUNT = flags.DEFINE_integer("jpeg_count", 256, "JPEGs in it.")
_RESULT = flags.DEFINE_string(
    "result", str(_REPO / "benchmarks/results/eval_bench.json"), "JSON out."
)

SIZES = ((480, 640), (640, 480))  # (height, width)
DETECTIONS = (100, 50, 10)
# COCO's share of small, medium and large instances and their sides (px).
BOX_CLASSES = ((0.41, 4, 32), (0.34, 32, 96), (0.25, 96, 400))
GT_PER_IMAGE = 7


def _pin_one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def coco_like_boxes(rng, count: int, height: int, width: int):
    """f64[count, 4] boxes (x1, y1, x2, y2) sized as COCO's instances."""
    import numpy as np

    shares = [share for share, _, _ in BOX_CLASSES]
    kind = rng.choice(len(BOX_CLASSES), count, p=shares)
    low = np.array([c[1] for c in BOX_CLASSES])[kind]
    high = np.array([c[2] for c in BOX_CLASSES])[kind]
    side = rng.uniform(low, high)
    aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0), count))
    half = 0.5 * np.stack([side * aspect**0.5, side / aspect**0.5], axis=1)
    centre = rng.uniform(0, 1, (count, 2)) * [width, height]
    return np.concatenate([centre - half, centre + half], axis=1)


def smooth_masks(rng, count: int):
    """f32[count, 28, 28]: a blob with noisy edges, as a model predicts."""
    import numpy as np

    grid = np.linspace(-1.0, 1.0, 28)
    logits = 6.0 * (0.6 - np.hypot(grid[:, None], grid[None]))
    noise = rng.normal(0.0, 1.5, (count, 28, 28))
    return (1.0 / (1.0 + np.exp(-(logits + noise)))).astype(np.float32)


def _clock():
    """CPU seconds of this process where pinned to one core (other jobs on
    a shared machine do not count), else wall seconds."""
    return time.process_time() if _CORES.value == 1 else time.perf_counter()


def _median_ms_per_image(fn, inputs, reps: int, workers: int) -> float:
    """Median over `reps` rounds of ms per input of fn over inputs."""
    times = []
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for round_ in range(reps + 1):
            started = _clock()
            if workers == 1:
                for item in inputs:
                    fn(item)
            else:
                list(pool.map(fn, inputs))
            if round_:  # round 0 warms up
                times.append(_clock() - started)
    return statistics.median(times) * 1e3 / len(inputs)


def _host_rows(workers: int) -> dict:
    """Pasting and RLE ms per image, new and previous implementation."""
    import numpy as np

    from detector.imaging import masks, rle
    from tests.detector.imaging import reference_masks

    previous = {
        "centres": reference_masks.paste_masks,
        "torchvision": reference_masks.paste_masks_torchvision,
    }

    def time_it(fn, inputs, reps=_ROUNDS.value):
        return _median_ms_per_image(lambda x: fn(*x), inputs, reps, workers)

    def paste_and_encode(*image):
        return rle.encode(masks.centres_crops(*image))

    def previous_encode(full):
        return [reference_masks.encode_rle(mask) for mask in full]

    rng = np.random.default_rng(0)
    rows = {}
    for height, width in SIZES:
        for count in DETECTIONS:
            inputs = [  # (masks, boxes, height, width) per image
                (
                    smooth_masks(rng, count),
                    coco_like_boxes(rng, count, height, width),
                    height,
                    width,
                )
                for _ in range(_HOST_IMAGES.value)
            ]
            row = {}
            for rule, paster in masks.MASK_PASTERS.items():
                row[f"paste_{rule}"] = time_it(paster, inputs)
            pasted = [(masks.centres_crops(*image),) for image in inputs]
            row["rle"] = time_it(rle.encode, pasted)
            row["paste_and_rle"] = time_it(paste_and_encode, inputs)
            # The previous implementation is slow: 4 images, fewer rounds.
            reps = max(1, _ROUNDS.value // 3)
            for rule, paster in previous.items():
                row[f"previous_paste_{rule}"] = time_it(
                    paster, inputs[:4], reps
                )
            full = [(reference_masks.paste_masks(*image),) for image in inputs]
            row["previous_rle"] = time_it(previous_encode, full[:4], reps)
            row["previous_paste_and_rle"] = (
                row["previous_paste_centres"] + row["previous_rle"]
            )
            rows[f"{width}x{height}, {count} detections"] = row
    return rows


def _objects(rng, image_id: int, boxes, height: int, width: int) -> list:
    """COCO dicts (image_id, category_id, bbox, segmentation) of boxes
    (x1, y1, x2, y2), each with a smooth mask pasted in it."""
    from detector.imaging import masks, rle

    pasted = masks.centres_crops(
        smooth_masks(rng, len(boxes)), boxes, height, width
    )
    return [
        {
            "image_id": image_id,
            "category_id": int(rng.integers(1, 4)),
            "bbox": [x1, y1, x2 - x1, y2 - y1],
            "segmentation": segmentation,
        }
        for (x1, y1, x2, y2), segmentation in zip(
            boxes.tolist(), rle.encode(pasted), strict=True
        )
    ]


def _coco_set(count: int, detections: int):
    """(ground truth dataset, detections) on count 640 x 480 images."""
    import numpy as np

    rng = np.random.default_rng(1)
    height, width = 480, 640
    limits = [width, height, width, height]
    images, annotations, results = [], [], []
    for image_id in range(1, count + 1):
        images.append(
            {"id": image_id, "height": height, "width": width, "file_name": ""}
        )
        truth = coco_like_boxes(rng, GT_PER_IMAGE, height, width)
        truth = np.clip(truth, 0, limits)
        for thing in _objects(rng, image_id, truth, height, width):
            _, _, w, h = thing["bbox"]
            thing.update(id=len(annotations) + 1, iscrowd=0, area=w * h)
            annotations.append(thing)
        boxes = coco_like_boxes(rng, detections, height, width)
        boxes[:GT_PER_IMAGE] = truth + rng.normal(0, 3, truth.shape)
        boxes = np.clip(boxes, 0, limits)
        for thing in _objects(rng, image_id, boxes, height, width):
            thing["score"] = float(rng.random())
            results.append(thing)
    dataset = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)],
    }
    return dataset, results


def _coco_rows() -> dict:
    """COCOeval ms per image, per backend, bbox and segm apart."""
    import contextlib
    import copy
    import io

    from detector.data import coco_folder
    from detector.evaluation import coco_backends

    rows = {}
    for count in DETECTIONS:
        dataset, results = _coco_set(_COCO_IMAGES.value, count)
        row = {}
        for name, backend in coco_backends.BACKENDS.items():
            try:
                __import__(backend.module)
            except ImportError:
                continue
            for iou_type in ("bbox", "segm"):
                times = []
                for _ in range(_ROUNDS.value + 1):
                    truth = coco_folder.build_coco(copy.deepcopy(dataset))
                    dets = copy.deepcopy(results)
                    if iou_type == "bbox":
                        for d in dets:
                            del d["segmentation"]
                    started = _clock()
                    with contextlib.redirect_stdout(io.StringIO()):
                        backend.run(
                            truth, dets, iou_type, sorted(truth.getImgIds())
                        )
                    times.append(_clock() - started)
                row[f"{name}_{iou_type}"] = (
                    statistics.median(times[1:]) * 1e3 / _COCO_IMAGES.value
                )
        rows[f"640x480, {count} detections"] = row
    return rows


def host_part() -> dict:
    """Both host tables; `--cores=1` in a child process pinned to a core."""
    if _CORES.value == 1:
        _pin_one_core()
        return {"host_rows": _host_rows(1), "coco_rows": _coco_rows()}
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "one_core.json"
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--parts=host",
                "--cores=1",
                f"--rounds={_ROUNDS.value}",
                f"--host_images={_HOST_IMAGES.value}",
                f"--coco_images={_COCO_IMAGES.value}",
                f"--result={out}",
            ],
            env=env,
            check=True,
        )
        one_core = json.loads(out.read_text())["host"]
    return {
        "one_core": one_core,
        "all_cores": {
            "host_rows": _host_rows(os.cpu_count()),
            "coco_rows": _coco_rows(),
        },
    }


def whole_part() -> dict:
    """eval_lib.evaluate split into device and host; predict_files."""
    import jax
    import numpy as np

    from benchmarks import predict_bench
    from configs import shapes as shapes_config
    from detector.data import eval_split
    from detector.data import shapes_writer as shapes
    from detector.evaluation import eval_lib
    from detector.export import in_process
    from detector.launch import validate
    from detector.predict import runner

    # input_bench.py's flags clash with predict_bench.py's: another process.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from benchmarks import input_bench; "
            "input_bench.write_jpeg_folder(sys.argv[2], int(sys.argv[3]))",
            str(_REPO),
            _JPEGS.value,
            str(_JPEG_COUNT.value),
        ],
        check=True,
    )
    config = shapes_config.get_config()
    config.data.source, config.data.root = "coco_json", _JPEGS.value
    config.data.num_classes = len(shapes.CATEGORIES)
    config.data.train_split = config.data.eval_split = "train"
    config.model.detection.score_threshold = 0.0
    config.model.detection.max_detections = 100
    validate.validate(config)
    timed = {"compile_s": 0.0, "coco_s": 0.0, "device_s": 0.0}
    compile_predict, run_predict = (
        eval_lib.compile_predict,
        eval_lib._run_predict,
    )
    coco_metrics, evaluate = eval_lib.coco_metrics, eval_lib.evaluate

    def timed_evaluate(*args, **kwargs):  # after the checkpoint's restore
        started = time.perf_counter()
        result = evaluate(*args, **kwargs)
        timed["evaluate_s"] = time.perf_counter() - started
        return result

    def timed_compile(*args, **kwargs):
        started = time.perf_counter()
        result = compile_predict(*args, **kwargs)
        timed["compile_s"] += time.perf_counter() - started
        return result

    def timed_loop(data, *args):
        started = time.perf_counter()
        results, latencies, drawn = run_predict(data, *args)
        timed["loop_s"] = time.perf_counter() - started
        batch = config.eval.batch_size
        timed["device_s"] = float(np.sum(latencies)) * batch / 1e3
        timed["detections"] = len(results)
        return results, latencies, drawn

    def timed_coco(*args, **kwargs):
        started = time.perf_counter()
        result = coco_metrics(*args, **kwargs)
        timed["coco_s"] += time.perf_counter() - started
        return result

    eval_lib.compile_predict = timed_compile
    eval_lib._run_predict = timed_loop
    eval_lib.coco_metrics = timed_coco
    eval_lib.evaluate = timed_evaluate
    split = f"train[:{_EVAL_IMAGES.value}]"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp) / "run"
        predict_bench.write_untrained_workdir(workdir, config)
        eval_lib.evaluate_checkpoint(config, workdir, split=split)
        data = eval_split.eval_split(config, split, 0)
        started = time.perf_counter()
        for _ in data.batches():  # the input pipeline alone
            pass
        timed["input_s"] = time.perf_counter() - started
        folder = pathlib.Path(tmp) / "jpegs"
        folder.mkdir()
        files = sorted((pathlib.Path(_JPEGS.value) / "train").iterdir())
        for path in files[: _EVAL_IMAGES.value]:
            (folder / path.name).symlink_to(path.resolve())
        predictor = in_process.predictor(config, workdir)
        walls, calls = [], []
        for round_ in range(_ROUNDS.value + 1):
            started = time.perf_counter()
            summary = runner.predict_files(  # every round predicts all
                predictor,
                [str(folder)],
                pathlib.Path(tmp) / "out",
                overwrite=True,
            )
            if round_:
                walls.append(time.perf_counter() - started)
                calls.append(summary["predict_seconds"])
    evaluated = timed["evaluate_s"] - timed["compile_s"]  # once per run
    images = _EVAL_IMAGES.value
    return {
        "eval": {
            "images": images,
            "detections": timed["detections"],
            "seconds_without_compile": evaluated,
            "device_predict_s": timed["device_s"],
            "predict_loop_s": timed["loop_s"],
            "loop_host_not_hidden_s": timed["loop_s"] - timed["device_s"],
            "input_alone_s": timed["input_s"],
            "coco_eval_s": timed["coco_s"],
            "after_loop_s": evaluated - timed["loop_s"],
            "host_not_hidden_share": (evaluated - timed["device_s"])
            / evaluated,
            "machine": f"{jax.devices()[0].device_kind}, JAX {jax.__version__}",
        },
        "predict_files": {
            "images": summary["images"],
            "images_per_s": images / statistics.median(walls),
            "predict_calls_images_per_s": images / statistics.median(calls),
        },
    }


def main(argv) -> None:
    del argv
    result = {"cpu_count": os.cpu_count()}
    if "host" in _PARTS.value:
        result["host"] = host_part()
    if "whole" in _PARTS.value:
        result["whole"] = whole_part()
    text = json.dumps(result, indent=2)
    print(text)
    pathlib.Path(_RESULT.value).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(_RESULT.value).write_text(text + "\n")


if __name__ == "__main__":
    app.run(main)
