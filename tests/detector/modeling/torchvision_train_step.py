"""torchvision's Mask R-CNN train-mode losses and gradients on one batch.

    python tests/detector/modeling/torchvision_train_step.py --out=PREFIX \
        --version=v1 --height=128 --width=192

Imports torch, torchvision, numpy and safetensors only (torch after
TensorFlow in one process crashes: tests/helpers/torch_process.py runs it
in a child process).

Builds make_torchvision_fixture.py's 'reduced' Mask R-CNN (v1: frozen
BatchNorm, the stem and layer1 frozen as torchvision's trainable_layers=3;
v2: BatchNorm everywhere, every layer trained), randomises it, puts it in
train mode and makes its sampling deterministic: both samplers take every
candidate (batch_size_per_image above any count, positive_fraction 1.0),
so the sums do not depend on the draw. It runs torchvision's own modules
(backbone, RegionProposalNetwork, RoIHeads; the images are already
normalised, so GeneralizedRCNNTransform is skipped) on a 2-image batch of
smooth noise with elliptic GT masks, and writes:

- PREFIX.weights.safetensors: the state dict (float32);
- PREFIX.grads.safetensors: each parameter's gradient of the summed
  losses under the parameter's name (0 where it takes none), buffers as
  in the state dict (so the weight loader maps it like a state dict);
- PREFIX.npz: images f32[B, 3, H, W], boxes_{b}, labels_{b}, masks_{b}
  u8[G, H, W], every loss term (loss_objectness, loss_rpn_box_reg,
  loss_classifier, loss_box_reg, loss_mask) and trainable (the names
  that take gradients).
"""

import argparse
import pathlib
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from torchvision.models.detection.image_list import ImageList

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "weights"))
import make_torchvision_fixture as fixture  # noqa: E402

EVERY = 10**8  # batch_size_per_image above any candidate count
TOP_K_TRAIN = 2000  # torchvision's pre- and post-NMS top-k in training
# (height, width) fractions of each image's GT ellipses: centre y, x, radii.
ELLIPSES = (
    (
        (0.30, 0.30, 0.18, 0.22),
        (0.65, 0.60, 0.25, 0.20),
        (0.45, 0.80, 0.1, 0.1),
    ),
    ((0.50, 0.40, 0.30, 0.25), (0.25, 0.75, 0.12, 0.18)),
)
LABELS = ((1, 18, 90), (3, 44))


def make_batch(height: int, width: int, seed: int):
    """Images f32[2, 3, H, W] (float16-exact), per image boxes f32[G, 4],
    labels i64[G] and masks u8[G, H, W]."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((2, 3, height, width)).astype(np.float32)
    yy, xx = np.mgrid[:height, :width]
    boxes, masks = [], []
    for b, ellipses in enumerate(ELLIPSES):
        image_masks = []
        for cy, cx, ry, rx in ellipses:
            inside = ((yy / height - cy) / ry) ** 2 + (
                (xx / width - cx) / rx
            ) ** 2 <= 1.0
            images[b] += 2.0 * inside * rng.standard_normal((3, 1, 1))
            image_masks.append(inside.astype(np.uint8))
        image_masks = np.stack(image_masks)
        ys, xs = np.any(image_masks, 2), np.any(image_masks, 1)
        image_boxes = [
            [
                x.argmax(),
                y.argmax(),
                len(x) - x[::-1].argmax(),
                len(y) - y[::-1].argmax(),
            ]
            for y, x in zip(ys, xs, strict=True)
        ]
        boxes.append(np.asarray(image_boxes, np.float32))
        masks.append(image_masks)
    images = images.astype(np.float16).astype(np.float32)
    labels = [np.asarray(x, np.int64) for x in LABELS]
    return images, boxes, labels, masks


def build(version: str, seed: int) -> torch.nn.Module:
    """The reduced model, randomised, deterministic sampling, train mode."""
    torch.manual_seed(seed)
    model = fixture.build("reduced", version)
    fixture.randomise(model, seed, half=True)
    if version == "v1":  # torchvision's trainable_layers=3
        body = model.backbone.body
        for part in (body.conv1, body.layer1):
            for parameter in part.parameters():
                parameter.requires_grad_(False)
    for sampler in (model.rpn.fg_bg_sampler, model.roi_heads.fg_bg_sampler):
        sampler.batch_size_per_image = EVERY
        sampler.positive_fraction = 1.0
    model.rpn._pre_nms_top_n = {"training": TOP_K_TRAIN, "testing": 1000}
    model.rpn._post_nms_top_n = {"training": TOP_K_TRAIN, "testing": 1000}
    return model.train()


def run(model, images, boxes, labels, masks) -> tuple[dict, dict]:
    """torchvision's losses (floats) and every parameter's gradient."""
    x = torch.from_numpy(images)
    sizes = [tuple(x.shape[-2:])] * x.shape[0]
    targets = [
        {
            "boxes": torch.from_numpy(b),
            "labels": torch.from_numpy(lab),
            "masks": torch.from_numpy(m),
        }
        for b, lab, m in zip(boxes, labels, masks, strict=True)
    ]
    features = model.backbone(x)
    proposals, rpn_losses = model.rpn(ImageList(x, sizes), features, targets)
    _, roi_losses = model.roi_heads(features, proposals, sizes, targets)
    terms = {**rpn_losses, **roi_losses}
    sum(terms.values()).backward()
    grads = {
        name: (
            p.grad.detach().clone()
            if p.grad is not None
            else torch.zeros_like(p)
        )
        for name, p in model.named_parameters()
    }
    out = {name: float(value.detach()) for name, value in terms.items()}
    return out, grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", choices=("v1", "v2"), default="v1")
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    model = build(args.version, args.seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    images, boxes, labels, masks = make_batch(
        args.height, args.width, args.seed
    )
    terms, grads = run(model, images, boxes, labels, masks)
    out = pathlib.Path(args.out)
    weights = {k: v.float().contiguous() for k, v in state.items()}
    save_file(weights, f"{out}.weights.safetensors")
    grad_state = dict(weights)
    grad_state.update({k: v.float().contiguous() for k, v in grads.items()})
    save_file(grad_state, f"{out}.grads.safetensors")
    arrays = {"images": images}
    for b in range(len(boxes)):
        arrays[f"boxes_{b}"] = boxes[b]
        arrays[f"labels_{b}"] = labels[b]
        arrays[f"masks_{b}"] = masks[b]
    arrays["trainable"] = np.asarray(
        [n for n, p in model.named_parameters() if p.requires_grad]
    )
    for name, value in terms.items():
        arrays[name] = np.asarray(value)
    np.savez(f"{out}.npz", **arrays)


if __name__ == "__main__":
    main()
