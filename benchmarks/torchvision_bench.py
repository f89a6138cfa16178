"""torchvision's Mask R-CNN train step and predict on step_bench's batches.

    python benchmarks/step_bench.py --config=configs/coco_r50_fpn.py:shapes \
        --save_batches=batches.npz                  # where TensorFlow is
    python benchmarks/torchvision_bench.py --batches=batches.npz \
        [--own_resize] [--ours=benchmarks/out/step_bench.json]

Builds torchvision's MaskRCNN with the config's settings (frozen BatchNorm,
the trainable backbone stages of model.freeze_at, RPN top-k, RoI batch,
detections, classes + background; random init, nothing downloaded), trains
it eagerly with SGD (the config's peak LR, momentum and weight decay) under
bfloat16 autocast on CUDA (float32 on CPU), and reports the median and p90
train step time after --warmup steps, images/s and predict ms/image
(eval, no_grad). Inputs are either the batch file's canvases, which the
transform leaves at their size (min_size/max_size = the canvas sides, mean
0, std 1: its resize and normalise run as identities), or with --own_resize
each image cropped to its own size and resized by torchvision's 800/1333
transform. Needs the `.[torch]` extra; writes torchvision_bench.json under
--out and prints a table (with ours/torchvision when --ours is given).
"""

import contextlib
import json
import os
import pathlib
import platform
import sys
import time
from collections.abc import Sequence

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks import batch_file  # noqa: E402

# torchvision's own resize (its maskrcnn_resnet50_fpn defaults).
OWN_MIN_SIZE, OWN_MAX_SIZE = 800, 1333
INSTALL_HINT = "pip install -e '.[torch]'"


def import_torch():
    """(torch, torchvision), or SystemExit with one line naming the extra."""
    try:
        import torch
        import torchvision
    except ImportError as e:
        raise SystemExit(
            f"torchvision_bench.py needs torch and torchvision ({e}): "
            f"{INSTALL_HINT}"
        ) from None
    return torch, torchvision


def trainable_layers(freeze_at: int) -> int:
    """torchvision's trainable ResNet stages for our model.freeze_at (0:
    nothing frozen, 1: the stem, k: the stem and k-1 stages)."""
    if not 0 <= freeze_at <= 5:
        raise ValueError(f"model.freeze_at={freeze_at}: must be in 0..5")
    return 5 - freeze_at


def build_model(config: ml_collections.ConfigDict, size: tuple[int, int]):
    """torchvision's MaskRCNN with the config's settings; its transform
    resizes to (min, max) side `size` with mean 0 and std 1 (the batch
    file's images are normalised already)."""
    torch, torchvision = import_torch()
    from torchvision.models.detection import MaskRCNN, backbone_utils
    from torchvision.ops import FrozenBatchNorm2d

    model = config.model
    if model.norm != "frozen_batch":
        raise ValueError(
            f"model.norm={model.norm!r}: torchvision's model is timed with "
            f"frozen BatchNorm only"
        )
    if (model.min_level, model.max_level) != (2, 6):
        raise ValueError(
            f"model levels {model.min_level}..{model.max_level}: "
            f"torchvision's FPN has P2..P6"
        )
    backbone = backbone_utils.resnet_fpn_backbone(
        backbone_name=model.backbone,
        weights=None,
        norm_layer=FrozenBatchNorm2d,
        trainable_layers=trainable_layers(model.freeze_at),
    )
    rpn, roi, det = model.rpn, model.roi, model.detection
    return MaskRCNN(
        backbone,
        num_classes=config.data.num_classes + 1,
        min_size=min(size),
        max_size=max(size),
        image_mean=[0.0, 0.0, 0.0],
        image_std=[1.0, 1.0, 1.0],
        rpn_pre_nms_top_n_train=rpn.pre_nms_top_k_train,
        rpn_pre_nms_top_n_test=rpn.pre_nms_top_k_test,
        rpn_post_nms_top_n_train=rpn.post_nms_top_k_train,
        rpn_post_nms_top_n_test=rpn.post_nms_top_k_test,
        rpn_nms_thresh=rpn.nms_iou,
        rpn_fg_iou_thresh=rpn.fg_iou,
        rpn_bg_iou_thresh=rpn.bg_iou,
        rpn_batch_size_per_image=rpn.num_samples,
        rpn_positive_fraction=rpn.positive_fraction,
        box_batch_size_per_image=roi.num_rois,
        box_positive_fraction=roi.fg_fraction,
        box_fg_iou_thresh=roi.fg_iou,
        box_bg_iou_thresh=roi.bg_iou_high,
        box_score_thresh=det.score_threshold,
        box_nms_thresh=det.nms_iou,
        box_detections_per_img=det.max_detections,
    )


def paste_masks(crops: np.ndarray, boxes: np.ndarray, hw: Sequence[int]):
    """uint8[N, H, W] image masks from S x S crops over `boxes` (x1, y1,
    x2, y2 pixels), each crop resized to its box by nearest neighbour."""
    masks = np.zeros((len(boxes), *hw), np.uint8)
    size = crops.shape[-1]
    for mask, crop, box in zip(masks, crops, boxes, strict=True):
        x1, y1, x2, y2 = np.rint(box).astype(int)
        x1, y1 = max(x1, 0), max(y1, 0)
        x2, y2 = min(max(x2, x1 + 1), hw[1]), min(max(y2, y1 + 1), hw[0])
        if x2 <= x1 or y2 <= y1:
            continue
        rows = (np.arange(y2 - y1) + 0.5) * size // (y2 - y1)
        cols = (np.arange(x2 - x1) + 0.5) * size // (x2 - x1)
        mask[y1:y2, x1:x2] = crop[np.ix_(rows.astype(int), cols.astype(int))]
    return masks


def to_inputs(batch: dict, device, own_resize: bool) -> tuple[list, list]:
    """(images [3, H, W], targets) of one batch on `device`: the canvases,
    or with `own_resize` each image cropped to its `image_size`."""
    torch, _ = import_torch()
    images, targets = [], []
    for i in range(len(batch["image"])):
        image = batch["image"][i]
        if own_resize:
            height, width = (int(s) for s in batch["image_size"][i])
            image = image[:height, :width]
        hw = image.shape[:2]
        boxes = np.asarray(batch["boxes"][i], np.float32).copy()
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, hw[1])
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, hw[0])
        keep = (
            np.asarray(batch["valid"][i], bool)
            & (boxes[:, 2] > boxes[:, 0])
            & (boxes[:, 3] > boxes[:, 1])
        )
        target = {
            "boxes": boxes[keep],
            "labels": np.asarray(batch["classes"][i])[keep].astype(np.int64),
            "masks": paste_masks(batch["masks"][i][keep], boxes[keep], hw),
        }
        images.append(
            torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
            .float()
            .to(device)
        )
        targets.append(
            {k: torch.from_numpy(v).to(device) for k, v in target.items()}
        )
    return images, targets


def _autocast(torch, device):
    """bfloat16 autocast on CUDA; none (float32) elsewhere."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _timed(torch, device, fn, calls: int, warmup: int) -> list[float]:
    """Milliseconds of each of `calls` calls of fn(i) after `warmup`."""
    times = []
    for i in range(warmup + calls):
        started = time.perf_counter()
        fn(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append((time.perf_counter() - started) * 1e3)
    return times


def run(
    config: ml_collections.ConfigDict,
    batches: Sequence[dict],
    *,
    steps: int,
    warmup: int,
    own_resize: bool,
    device: str | None = None,
) -> dict:
    """Times torchvision's train step and predict on `batches` (cycled)."""
    torch, _ = import_torch()
    device = torch.device(
        device or ("cuda" if torch.cuda.is_available() else "cpu")
    )
    torch.manual_seed(config.seed)
    size = (
        (OWN_MIN_SIZE, OWN_MAX_SIZE)
        if own_resize
        else tuple(batches[0]["image"].shape[1:3])
    )
    model = build_model(config, size).to(device)
    inputs = [to_inputs(b, device, own_resize) for b in batches]
    train = config.train
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=train.learning_rate,
        momentum=train.momentum,
        weight_decay=train.weight_decay,
    )
    losses = []  # the last step's

    def step(i):
        images, targets = inputs[i % len(inputs)]
        optimizer.zero_grad(set_to_none=True)
        with _autocast(torch, device):
            loss = sum(model(images, targets).values())
        loss.backward()
        optimizer.step()
        losses[:] = [loss.detach()]

    model.train()
    step_ms = _timed(torch, device, step, steps, warmup)

    def predict(i):
        images, _ = inputs[i % len(inputs)]
        with torch.no_grad(), _autocast(torch, device):
            model(images)

    model.eval()
    predict_ms = _timed(torch, device, predict, steps, warmup)
    batch_size = len(batches[0]["image"])
    median = float(np.median(step_ms))
    return {
        "device": str(device),
        "autocast": "bfloat16" if device.type == "cuda" else "off (float32)",
        "input": "own_resize" if own_resize else "canvas",
        "transform_size": list(size),
        "train": {
            "median_ms": median,
            "p90_ms": float(np.percentile(step_ms, 90)),
            "images_per_sec": batch_size / (median / 1e3),
            "final_total_loss": float(losses[-1]),
        },
        "predict": {
            "median_ms": float(np.median(predict_ms)),
            "p90_ms": float(np.percentile(predict_ms, 90)),
            "ms_per_image": float(np.median(predict_ms)) / batch_size,
        },
    }


def machine(torch, torchvision, device: str) -> dict:
    """Where the timings were taken."""
    return {
        "device": device,
        "device_kind": (
            torch.cuda.get_device_name(0)
            if device.startswith("cuda")
            else platform.processor() or platform.machine()
        ),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }


def ratios(ours: dict, result: dict) -> dict[str, float]:
    """{NMS backend: our median step ms / torchvision's} from step_bench.json
    (below 1: ours is faster)."""
    return {
        backend: r["median_ms"] / result["train"]["median_ms"]
        for backend, r in ours["results"].items()
    }


def load_ours(path: str, batch_size: int) -> dict:
    """step_bench.json at `path`, checked to time the same batch size."""
    try:
        ours = json.loads(pathlib.Path(path).read_text())
        got = ours["batch_size"], ours["results"]
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(
            f"--ours={path}: not a step_bench.json ({e})"
        ) from None
    if got[0] != batch_size:
        raise ValueError(
            f"--ours={path}: batch {got[0]}, the batch file's is "
            f"{batch_size}; time both on the same batch file"
        )
    return ours


def table(result: dict, compared: dict[str, float] | None) -> str:
    train, predict = result["train"], result["predict"]
    lines = [
        "| model | step median ms | p90 ms | images/s | predict ms/image |",
        "|---|---|---|---|---|",
        f"| torchvision ({result['input']}) | {train['median_ms']:.1f} | "
        f"{train['p90_ms']:.1f} | {train['images_per_sec']:.2f} | "
        f"{predict['ms_per_image']:.1f} |",
    ]
    if compared:
        lines += [
            "",
            "| our backend | ours/torchvision step time |",
            "|---|---|",
        ]
        lines += [f"| {b} | {r:.2f} |" for b, r in compared.items()]
    return "\n".join(lines)


def _define_flags() -> None:
    """The command's flags (defined only when run: tests import this)."""
    global _CONFIG, _BATCHES, _STEPS, _WARMUP, _OWN_RESIZE, _OURS, _OUT
    _CONFIG = config_flags.DEFINE_config_file(
        "config",
        str(_REPO / "configs" / "coco_r50_fpn.py") + ":shapes",
        "Config whose model settings torchvision's model takes.",
    )
    _BATCHES = flags.DEFINE_string(
        "batches", None, "Batch file of step_bench.py --save_batches."
    )
    _STEPS = flags.DEFINE_integer("steps", 30, "Timed steps (and predicts).")
    _WARMUP = flags.DEFINE_integer("warmup", 5, "Untimed steps (and predicts).")
    _OWN_RESIZE = flags.DEFINE_bool(
        "own_resize",
        False,
        "Each image at its own size, resized by torchvision's 800/1333 "
        "transform, instead of the batch file's canvases.",
    )
    _OURS = flags.DEFINE_string(
        "ours",
        None,
        "step_bench.json of the same batch file: prints the ratio.",
    )
    _OUT = flags.DEFINE_string("out", "benchmarks/out", "Output folder.")


def main(argv) -> None:
    del argv
    torch, torchvision = import_torch()
    if not _BATCHES.value:
        raise SystemExit("--batches: a batch file of step_bench.py is needed")
    config = _CONFIG.value
    try:
        batches = batch_file.load(_BATCHES.value)
        batch_file.check_shapes(batches, config, _BATCHES.value)
        batch_size = config.train.batch_size
        ours = load_ours(_OURS.value, batch_size) if _OURS.value else None
    except (OSError, ValueError) as e:
        raise SystemExit(str(e)) from None
    result = run(
        config,
        batches,
        steps=_STEPS.value,
        warmup=_WARMUP.value,
        own_resize=_OWN_RESIZE.value,
    )
    compared = ratios(ours, result) if ours else None
    out = pathlib.Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    info = machine(torch, torchvision, result["device"])
    (out / "torchvision_bench.json").write_text(
        json.dumps(
            {
                "machine": info,
                "config": config_flags.get_config_filename(
                    flags.FLAGS["config"]
                ),
                "batch_size": batch_size,
                "batches": _BATCHES.value,
                "steps": _STEPS.value,
                "warmup": _WARMUP.value,
                "result": result,
                "ours_over_torchvision": compared,
            },
            indent=2,
        )
    )
    print(
        f"\ntorchvision Mask R-CNN, {info['device_kind']} "
        f"({info['cpu_count']} cores), batch {batch_size}, autocast "
        f"{result['autocast']}, median of {_STEPS.value} steps\n"
    )
    print(table(result, compared))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
