"""Our Mask R-CNN on torchvision's weights and input, stage by stage.

    model = torchvision_parity.our_model(weights, size=192, width="reduced")
    errors = torchvision_parity.measure(model, np.load(outputs_file))

`our_model` builds configs/coco_r50_fpn.py:torchvision or
:torchvision_v2 (float32, 90
classes so labels are torchvision's indices), shrunk like
make_torchvision_fixture.py's 'reduced' model when asked, and starts it
from the torchvision state dict through model.init_checkpoint. `measure`
runs it on the same input and returns the measured differences:

- fpn_{i}, rpn_logits_{i}, rpn_deltas_{i}: max |ours - theirs| / max |theirs|;
- proposals_{b}: per image, the fraction of torchvision's proposals that
  one of ours matches with IoU >= 0.99 (in a padded image, anchors over
  the constant padding have exactly equal scores, and torch and XLA break
  such ties differently);
- detections: the fraction of torchvision's detections matched by one of
  ours of the same label with IoU >= 0.99, and the largest score
  difference of the matched ones;
- mask_iou: the smallest pasted-mask IoU of the matched detections (both
  pasted by torchvision's rule at the input size).
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs import coco_r50_fpn
from detector import factory
from detector.imaging import masks as mask_paste
from detector.state import warm_start

# make_torchvision_fixture.REDUCED, as our config fields.
REDUCED = {
    "backbone": "tiny",
    "backbone_width": 16,
    "fpn_channels": 32,
    "roi.box_head_dim": 64,
    "roi.box_head_conv_dim": 32,  # v2's 4conv1fc
    "roi.mask_head_dim": 32,
}
MATCH_IOU = 0.99


def config_for(
    weights: pathlib.Path, *, size: int, width: str, variant="torchvision"
):
    """The :torchvision (v1) or :torchvision_v2 config at `size`, 'full' or
    'reduced' widths."""
    config = coco_r50_fpn.get_config(variant)
    config.model.init_checkpoint = str(weights)
    config.model.dtype = "float32"
    config.data.num_classes = 90
    config.data.image_size = (size, size)
    if width == "reduced":
        for key, value in REDUCED.items():
            section = config.model
            *parents, leaf = key.split(".")
            for parent in parents:
                section = section[parent]
            section[leaf] = value
    return config


def our_model(
    weights: pathlib.Path, *, size: int, width: str, variant="torchvision"
):
    """Our model started from torchvision's state dict, in eval mode."""
    config = config_for(weights, size=size, width=width, variant=variant)
    abstract = nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )
    graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), (params, rest))
    model = nnx.merge(graphdef, *warm_start.apply(config, *zeros))
    model.eval()
    return model


def _relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    scale = max(float(np.abs(theirs).max()), 1e-12)
    return float(np.abs(np.asarray(ours) - theirs).max()) / scale


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU f64[len(a), len(b)] of (x1, y1, x2, y2) boxes."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=-1)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=-1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=-1)
    return inter / np.maximum(area_a[:, None] + area_b[None] - inter, 1e-12)


@nnx.jit
def _stages(model, images):
    features = model.features(images)
    logits, deltas = model.rpn(features)
    proposals, valid = model.proposals(images)
    return features, logits, deltas, proposals, valid, model.predict(images)


def measure(model, expected) -> dict[str, float]:
    """Measured differences to torchvision's outputs (module docstring)."""
    images = jnp.asarray(expected["images"].transpose(0, 2, 3, 1))
    with jax.default_device(jax.devices("cpu")[0]):
        features, logits, deltas, proposals, valid, found = jax.device_get(
            _stages(model, images)
        )
    errors = {}
    for i, level in enumerate(features):
        theirs = expected[f"fpn_{i}"].transpose(0, 2, 3, 1)
        errors[f"fpn_{i}"] = _relative(level, theirs)
    for i, (lo, de) in enumerate(zip(logits, deltas, strict=True)):
        errors[f"rpn_logits_{i}"] = _relative(lo, expected[f"rpn_logits_{i}"])
        errors[f"rpn_deltas_{i}"] = _relative(de, expected[f"rpn_deltas_{i}"])
    matched, total, score_error, mask_iou = 0, 0, 0.0, 1.0
    size = images.shape[1:3]
    for b in range(images.shape[0]):
        theirs = expected[f"proposals_{b}"]
        overlap = iou(theirs, proposals[b][valid[b]])
        errors[f"proposals_{b}"] = float(
            (overlap.max(axis=1) >= MATCH_IOU).mean()
        )
        count = int(found["num_detections"][b])
        ours_boxes = found["boxes"][b][:count]
        ours_labels = found["classes"][b][:count]
        overlap = iou(expected[f"boxes_{b}"], ours_boxes)
        same = expected[f"labels_{b}"][:, None] == ours_labels[None]
        overlap = np.where(same, overlap, 0.0)
        pairs = [
            (t, int(np.argmax(row)))
            for t, row in enumerate(overlap)
            if row.size and row.max() >= MATCH_IOU
        ]
        matched += len(pairs)
        total += len(overlap)
        if not pairs:
            continue
        t_index, o_index = (np.asarray(x) for x in zip(*pairs, strict=True))
        score_error = max(
            score_error,
            float(
                np.abs(
                    found["scores"][b][o_index]
                    - expected[f"scores_{b}"][t_index]
                ).max()
            ),
        )
        ours_pasted = mask_paste.torchvision_crops(
            found["masks"][b][o_index], ours_boxes[o_index], *size
        ).full()
        theirs_pasted = np.unpackbits(
            expected[f"pasted_{b}"], axis=-1, count=size[1]
        ).astype(bool)[t_index]
        inter = (ours_pasted & theirs_pasted).sum(axis=(1, 2))
        union = (ours_pasted | theirs_pasted).sum(axis=(1, 2))
        ious = np.where(union > 0, inter / np.maximum(union, 1), 1.0)
        mask_iou = min(mask_iou, float(ious.min()))
    errors["detections_matched"] = matched / max(total, 1)
    errors["detections_total"] = float(total)
    errors["score_error"] = score_error
    errors["mask_iou"] = mask_iou
    return errors
