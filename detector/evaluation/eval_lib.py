"""COCO-subset evaluation: predict on a split (the one inference function,
`detector.inference.detect`, and its one host formatter,
`imaging.detections`), then COCOeval; results in
`<workdir>/eval_<slug>.json` (docs/training.md)."""

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pycocotools import coco as coco_lib

from detector.data import eval_split as eval_split_lib
from detector.distributed import determinism, multihost, sharding
from detector.evaluation import (
    coco_backends,
    overlap,
    per_category,
    result_names,
    visualize,
)
from detector.imaging import canvases
from detector.imaging import detections as detections_lib
from detector.inference import detect
from detector.inference import programs as programs_lib
from detector.state import train_state as state_lib
from detector.utils import files, progress
from ops import host_audit
from ops import nms as nms_lib

METRIC_NAMES = (
    "AP",
    "AP50",
    "AP75",
    "APs",
    "APm",
    "APl",
    "AR1",
    "AR10",
    "AR100",
    "ARs",
    "ARm",
    "ARl",
)


def compile_predict(
    config: ml_collections.ConfigDict,
    weights: detect.Weights,
    category_ids: list[int],
    mesh: Mesh,
    *,
    placed: tuple[canvases.Canvas, ...],
    strict: bool = False,
) -> tuple[programs_lib.Programs, list[host_audit.HostRoundTrip]]:
    """The inference function (`detect.detect_fn`, sharded over the mesh)
    compiled and audited for eval.batch_size images on each canvas of
    `placed` (those the eval split uses, `EvalSplit.canvases`).

    Raises HostRoundTripError when `strict` and a program goes through the
    host.
    """
    rows = NamedSharding(mesh, P("data"))
    batch = config.eval.batch_size
    sizes = jax.ShapeDtypeStruct((batch, 2), jnp.int32, sharding=rows)
    jitted = detect.sharded(
        detect.detect_fn(config, weights.graphdef, category_ids), mesh
    )
    return programs_lib.compile_per_canvas(
        jitted,
        lambda canvas: (
            weights.params,
            weights.rest,
            jax.ShapeDtypeStruct(
                (batch, *canvas, 3), jnp.float32, sharding=rows
            ),
            sizes,
            sizes,
        ),
        placed,
        name="predict",
        strict=strict,
        advice=nms_lib.host_advice,
    )


def coco_metrics(
    coco_gt: coco_lib.COCO,
    results: list[dict],
    iou_type: str,
    image_ids: list[int],
    backend: str = coco_backends.DEFAULT,
) -> tuple[dict[str, float], list[dict]]:
    """COCOeval for one iou_type ('bbox' or 'segm'); prints the summary
    and the per-category table.

    `backend` names the COCOeval (config eval.coco_backend). Metrics COCO
    cannot define (no ground truth in an area range, or at all) are -1, as
    pycocotools reports them, with detections or without.

    Returns:
      ({metric name: value}, `per_category.rows`: each category's AP).
    """
    if not results:
        logging.warning("No %s detections.", iou_type)
    print(f"COCO {iou_type}:")
    scores = coco_backends.evaluate(
        backend, coco_gt, results, iou_type, image_ids
    )
    names = {c: coco_gt.cats[c]["name"] for c in coco_gt.cats}
    rows = per_category.rows(scores.per_category, names)
    print(per_category.table(iou_type, rows), flush=True)
    metrics = dict(zip(METRIC_NAMES, map(float, scores.stats), strict=True))
    return metrics, rows


def split_slug(split: str) -> str:
    """A file-name-safe name that encodes the split string exactly.

    A split that is already such a name stays as it is ('val2017'); any
    other gets a readable form plus a short hash of the exact string:
    'val[:3]' -> 'val_3-<8 hex digits>', so 'val[-3:]' names another file.
    """
    readable = re.sub(r"[^A-Za-z0-9%_]+", "_", split).strip("_")
    if readable == split:
        return split
    digest = hashlib.sha256(split.encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


def data_origin(data: ml_collections.ConfigDict | dict) -> dict[str, str]:
    """Which data a result is of: {"source", "root"} of a config's data
    section (tfds: root is the builder name, under its data_dir if set)."""
    if data["source"] == "tfds":
        name, folder = data["tfds_name"], data["tfds_data_dir"]
        root = os.path.join(folder, name) if folder else name
    else:
        root = os.path.abspath(os.path.expanduser(data["root"]))
    return {"source": data["source"], "root": root}


def _run_origin(workdir: pathlib.Path) -> dict[str, str] | None:
    """The data of the run's own config.json, or None where there is none
    (a run not started yet, a model evaluated from model.init_checkpoint)."""
    try:
        return data_origin(
            json.loads((workdir / "config.json").read_text())["data"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _origin_name(origin: dict[str, str]) -> str:
    """'<source>_<root name>', file-name safe: 'coco_json_coco'."""
    root = origin["root"].rstrip("/")
    name = root if origin["source"] == "tfds" else os.path.basename(root)
    name = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") or "root"
    return f"{origin['source']}_{name}"


def result_stem(
    workdir: pathlib.Path,
    split: str,
    data: ml_collections.ConfigDict | None = None,
    step: int | None = None,
    settings: dict | None = None,
) -> pathlib.Path:
    """The stem of a result's .json and .png: `<workdir>/eval_<slug>` for
    the run's own data, `<workdir>/eval_<source>_<root name>_<slug>` for
    `data` that is not the data of the run's config.json (None: the run's
    own, as in training); the `settings` that differ from the run's own
    follow (`result_names.suffix`), then `_step<N>` for a checkpoint named
    by step (eval.py --step, --all_steps).

    A .json there that is not a readable result (cut short, not JSON) is
    logged and will be overwritten.

    Raises:
      ValueError: the .json there holds the result of another split or
        other data (never overwritten).
    """
    workdir = pathlib.Path(workdir)
    origin = None if data is None else data_origin(data)
    own = origin is None or origin == (_run_origin(workdir) or origin)
    prefix = "eval_" if own else f"eval_{_origin_name(origin)}_"
    suffix = result_names.suffix(settings or {})
    suffix += "" if step is None else f"_step{step}"
    stem = workdir / f"{prefix}{split_slug(split)}{suffix}"
    path = stem.with_suffix(".json")
    if path.exists():
        try:
            held = json.loads(path.read_text())
            other = held["split"]
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
            logging.warning(
                "%s holds no readable eval result (%s): it will be overwritten",
                path,
                f"{type(e).__name__}: {e}"[:120],
            )
            return stem
        if other != split:
            raise ValueError(
                f"{path}: holds the result of split {other!r}, "
                f"not {split!r}; move it away to evaluate "
                f"{split!r}"
            )
        held_origin = {k: held.get(k) for k in ("source", "root")}
        if origin and "source" in held and held_origin != origin:
            raise ValueError(
                f"{path}: holds the result of {held_origin['source']} data "
                f"at {held_origin['root']}, not {origin['root']}; move it "
                "away to evaluate this data"
            )
    return stem


def saved_result(
    workdir: pathlib.Path, config: ml_collections.ConfigDict
) -> dict:
    """The saved result of the run's eval split on its own data (what
    train.py reports), or {} where there is none readable: a result that
    does not record `config`'s data (source and root) is not the run's."""
    try:
        stem = result_stem(workdir, config.data.eval_split)
        result = json.loads(stem.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}
    recorded = {k: result.get(k) for k in ("source", "root")}
    return result if recorded == data_origin(config.data) else {}


def detections_path(stem: pathlib.Path) -> pathlib.Path:
    """`<stem>.detections.json`: every detection in COCO results format,
    in image-id order.

    The list pycocotools' `loadRes` and the COCO test server take: image_id,
    category_id, bbox [x, y, w, h] in original pixels, score and, with
    masks, segmentation (RLE).
    """
    return stem.with_name(f"{stem.name}.detections.json")


def check_request(split: str | None, max_images: int) -> None:
    """Raises ValueError on an empty --split or a negative --max_images."""
    if split is not None and not split.strip():
        raise ValueError(
            f"--split={split!r}: empty; name a split such as "
            "'val' or 'val2017[:500]', or leave it out for the "
            "config's data.eval_split"
        )
    if max_images < 0:
        raise ValueError(
            f"--max_images={max_images}: must be >= 0 (0: the whole split)"
        )


def _image_results(
    outputs: dict[str, np.ndarray],
    batch: dict[str, np.ndarray],
    mask_paste: str | None,
) -> list[dict]:
    """COCO results of a batch's valid rows (`detections.image_results`),
    each with its image id first."""
    results = []
    for i in np.flatnonzero(batch["image_valid"]):
        found, _ = detections_lib.image_results(
            outputs, i, *(int(v) for v in batch["orig_size"][i]), mask_paste
        )
        image_id = int(batch["image_id"][i])
        results += [{"image_id": image_id, **r} for r in found]
    return results


def _run_predict(
    context: "EvalContext",
    predict: programs_lib.Programs,
    weights: detect.Weights,
):
    """Predicts every batch; returns COCO results, latencies, drawings.

    Batch k becomes COCO results on a host thread while the device predicts
    batch k + 1 (`overlap.InOrder`); the results keep the batches' order.
    The drawings are this process's images of the lowest ids.
    """
    config, data, mesh = context.config, context.data, context.mesh
    params, rest = weights.params, weights.rest
    latencies = []
    drawn = visualize.LowestIds(config.eval.num_visualized)
    with host_audit.device_only_transfers(), overlap.InOrder() as host:
        for batch in progress.bar(
            data.batches(),
            total=data.num_batches,
            desc="Predicting",
            unit="batch",
            delay_s=progress.SLOW_LOOP_S,
        ):
            inputs = sharding.put_batch(
                batch, mesh, keys=("image", "image_size", "orig_size")
            )
            started = time.perf_counter()
            outputs = jax.block_until_ready(
                predict.run(
                    programs_lib.canvas_of(batch["image"]),
                    params,
                    rest,
                    inputs["image"],
                    inputs["image_size"],
                    inputs["orig_size"],
                )
            )
            latencies.append(
                (time.perf_counter() - started) * 1e3 / len(batch["image"])
            )
            outputs = sharding.local_rows(outputs, mesh)
            host.submit(
                _image_results,
                outputs,
                batch,
                config.eval.mask_paste if data.has_masks else None,
            )
            drawn.add(batch, outputs)
        results = [r for part in host.results() for r in part]
    return results, latencies, drawn.rows()


def _write_result(stem: pathlib.Path, summary: dict, detections: str) -> None:
    """Writes the detections, then the summary, once both are known to fit
    on the disk (a full disk names the file, before either is written)."""
    texts = {
        detections_path(stem): detections.encode(),
        stem.with_suffix(".json"): json.dumps(summary, indent=2).encode(),
    }
    files.check_space({path: len(data) for path, data in texts.items()})
    for path, data in texts.items():
        files.write_bytes(path, data)


@dataclasses.dataclass
class EvalContext:
    """What the evaluations of one run share, made once (`eval_context`):
    where they run and write, the split read, and predict compiled for the
    canvases that split uses (on first use)."""

    config: ml_collections.ConfigDict
    mesh: Mesh
    workdir: pathlib.Path
    split: str
    data: eval_split_lib.EvalSplit
    strict: bool = False  # a host round-trip in predict raises
    # Predict compiled (on first use), and its host round-trips.
    predict: programs_lib.Programs | None = None
    findings: list[host_audit.HostRoundTrip] = dataclasses.field(
        default_factory=list
    )
    # Settings that differ from the run's own (`result_names`): in the name.
    settings: dict = dataclasses.field(default_factory=dict)

    def compiled(self, weights: detect.Weights) -> programs_lib.Programs:
        """Predict for `weights`' model, compiled once per context."""
        if self.predict is None:
            self.predict, self.findings = compile_predict(
                self.config,
                weights,
                self.data.category_ids,
                self.mesh,
                placed=self.data.canvases,
                strict=self.strict,
            )
        return self.predict


def eval_context(
    config: ml_collections.ConfigDict,
    mesh: Mesh,
    workdir: str | pathlib.Path,
    *,
    split: str | None = None,
    max_images: int = 0,
    strict: bool = False,
) -> EvalContext:
    """Checks the request and reads the split (default: the config's eval
    split, its eval.max_images) for the evaluations of a run.

    Raises:
      ValueError: an empty `split`, a negative `max_images` (before
        anything is read), an eval batch the mesh does not divide, or a
        split the data does not have.
    """
    check_request(split, max_images)
    split = config.data.eval_split if split is None else split
    sharding.check_divisible("eval.batch_size", config.eval.batch_size, mesh)
    data = eval_split_lib.eval_split(
        config, split, max_images or config.eval.max_images
    )
    return EvalContext(
        config, mesh, pathlib.Path(workdir), split, data, strict=strict
    )


def evaluate(
    context: EvalContext, weights: detect.Weights, *, step_named: bool = False
) -> dict:
    """Evaluates `weights` on the context's split; writes eval_<slug>.json,
    .png and the detections (`detections_path`); `step_named`: the files
    carry the step (`result_stem`)."""
    config, data, split = context.config, context.data, context.split
    step = weights.step
    stem = result_stem(  # before the work
        context.workdir,
        split,
        config.data,
        step if step_named else None,
        context.settings,
    )
    predict = context.compiled(weights)
    # Said first: predicting draws a bar only on a terminal.
    logging.info(
        "Evaluating %s on %s: predicting %d images (%d batches), then COCOeval",
        "unsaved weights" if step is None else f"step {step}",
        split,
        len(data.coco.getImgIds()),
        data.num_batches,
    )
    results, latencies, drawn = _run_predict(context, predict, weights)
    # Every process's results (a collective), in image-id order; each
    # image keeps its detections' order.
    results = [r for part in multihost.gather_json(results) for r in part]
    results.sort(key=lambda r: r["image_id"])
    # Serialised before COCOeval adds its own keys to the dicts.
    detections = json.dumps(results) if jax.process_index() == 0 else ""
    image_ids = sorted(data.coco.getImgIds())  # all processes' images
    summary = {
        "split": split,
        **data_origin(config.data),
        "step": step,
        "checkpoint": weights.checkpoint,
        "images": len(image_ids),
    }
    if context.settings:
        summary["settings"] = context.settings
    box_results = [
        {k: v for k, v in r.items() if k != "segmentation"} for r in results
    ]
    backend = config.eval.coco_backend
    categories = {}  # iou type -> per_category.rows
    summary["bbox"], categories["bbox"] = coco_metrics(
        data.coco, box_results, "bbox", image_ids, backend
    )
    if data.has_masks:
        summary["segm"], categories["segm"] = coco_metrics(
            data.coco, results, "segm", image_ids, backend
        )
    else:
        logging.warning(
            "Split %s has no instance masks: segm not evaluated.", split
        )
    summary.update(
        per_category=categories,
        predict_latency_ms_per_image=float(np.median(latencies)),
        nms_backend=nms_lib.backend_name(
            config.model.rpn.nms_backend, config.model.detection.nms_backend
        ),
        host_roundtrips_per_predict=len(context.findings),
        deterministic=determinism.enabled(),
    )
    if jax.process_index() == 0:
        _write_result(stem, summary, detections)
        with files.naming(stem.with_suffix(".png")):
            visualize.draw_predictions(
                drawn,
                config,
                stem.with_suffix(".png"),
                names={c: data.coco.cats[c]["name"] for c in data.category_ids},
            )
    logging.info(
        "Eval %s: bbox AP %.3f%s, %.1f ms/image",
        split,
        summary["bbox"]["AP"],
        f", segm AP {summary['segm']['AP']:.3f}" if "segm" in summary else "",
        summary["predict_latency_ms_per_image"],
    )
    return summary


def _scores(result: dict) -> str:
    """'bbox AP 0.812, segm AP 0.790' (the tasks evaluated)."""
    return ", ".join(
        f"{task} AP {result[task]['AP']:.3f}"
        for task in ("bbox", "segm")
        if task in result
    )


def result_line(
    workdir: pathlib.Path,
    config: ml_collections.ConfigDict,
    result: dict,
    step_named: bool = False,
) -> str:
    """eval.py's line of one `evaluate_checkpoints` result: the step and
    split evaluated, the AP and the files written."""
    stem = result_stem(
        workdir,
        result["split"],
        config.data,
        result["step"] if step_named else None,
        result.get("settings"),
    )
    written = [
        path
        for path in (
            stem.with_suffix(".json"),
            stem.with_suffix(".png"),
            detections_path(stem),
        )
        if path.exists()
    ]
    names = ", ".join(  # the first in full, then the others' suffixes
        str(p) if n == 0 else p.name[len(stem.name) :]
        for n, p in enumerate(written)
    )
    return (
        f"evaluated step {result['step']} ({result['checkpoint']}) on "
        f"{result['split']}: {_scores(result)}; wrote {names or 'nothing'}"
    )


def chosen_steps(
    workdir: pathlib.Path, step: int | None = None, all_steps: bool = False
) -> list[int | None]:
    """The checkpoints eval.py evaluates: [None] (the newest intact one),
    [`step`], or every kept step in order (`all_steps`).

    Raises:
      ValueError: both asked for, no checkpoint kept, or `step` not kept
        (naming the kept steps); reads only the checkpoint list.
    """
    if step is not None and all_steps:
        raise ValueError("--step and --all_steps: give one or the other")
    if step is None and not all_steps:
        return [None]
    folder = pathlib.Path(workdir) / "checkpoints"
    kept = state_lib.kept_steps(workdir)
    flag = "--all_steps" if all_steps else f"--step={step}"
    if not kept:
        raise ValueError(
            f"{flag}: {folder} keeps no checkpoint (train first, or check "
            "--workdir)"
        )
    if all_steps:
        return list(kept)
    if step not in kept:
        raise ValueError(
            f"{flag}: {folder} keeps no checkpoint of step {step}; kept "
            f"steps: {', '.join(map(str, kept))}"
        )
    return [step]


def evaluate_checkpoint(
    config: ml_collections.ConfigDict,
    workdir: pathlib.Path,
    *,
    split: str | None = None,
    max_images: int = 0,
    step: int | None = None,
) -> dict:
    """`evaluate_checkpoints` of one checkpoint: `step`'s, or (None) the
    newest intact one; its result."""
    (result,) = evaluate_checkpoints(
        config, workdir, split=split, max_images=max_images, steps=[step]
    )
    return result


def evaluate_checkpoints(
    config: ml_collections.ConfigDict,
    workdir: pathlib.Path,
    *,
    split: str | None = None,
    max_images: int = 0,
    steps: list[int | None] | tuple[int | None, ...] = (None,),
) -> list[dict]:
    """Restores each checkpoint of `workdir` in `steps` (None: the newest
    intact one) and evaluates it; predict compiles once. A checkpoint named
    by step writes `eval_<slug>_step<N>.*` (`result_stem`).

    Reads the workdir only: a missing `checkpoints/` is an error, not
    created, unless config.model.init_checkpoint is set: then the model it
    starts (another run's weights, or a torchvision Mask R-CNN file) is
    evaluated as is.

    The caller validates `config` first (detector/launch/validate.py).

    Raises:
      ValueError: an empty `split` or a negative `max_images`, before
        anything is read; a split the data does not have, before the
        checkpoint is read.
    """
    check_request(split, max_images)
    multihost.check_same_config(config)
    state_lib.check_restorable(config, workdir)
    split = config.data.eval_split if split is None else split
    settings = result_names.changed_settings(config, workdir, max_images)
    for named in steps:  # a result it may not overwrite fails first
        result_stem(workdir, split, config.data, named, settings)
    context = eval_context(  # the split, before any checkpoint is read
        config,
        sharding.make_mesh(),
        workdir,
        split=split,
        max_images=max_images,
    )
    context.settings = settings
    pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
    results = []
    for position, named in enumerate(steps, start=1):
        if len(steps) > 1:
            logging.info(
                "Evaluating step %d (%d of %d)", named, position, len(steps)
            )
        weights = state_lib.restore_weights(
            config, workdir, context.mesh, step=named
        )
        results.append(evaluate(context, weights, step_named=named is not None))
    return results
