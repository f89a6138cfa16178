"""Writes torchvision Mask R-CNN weights, an input and its outputs.

    python tests/detector/weights/make_torchvision_fixture.py \
        --out=tests/detector/weights/data/torchvision_maskrcnn --width=reduced
    python tests/detector/weights/make_torchvision_fixture.py --version=v2 \
        --out=tests/detector/weights/data/torchvision_maskrcnn_v2 \
        --width=reduced

Imports torch and torchvision only (never JAX or TensorFlow: torchvision
after TensorFlow in one process crashes on some machines), so the parity
tests run it in a child process (tests/helpers/torch_process.py).

Builds `maskrcnn_resnet50_fpn(weights=None, weights_backbone=None)` (v1) or
`maskrcnn_resnet50_fpn_v2(...)` (v2) in eval mode ('full'), or the same
architecture shrunk ('reduced': a ResNet of one basic block per stage with
16 stem channels, 32 FPN channels, a 64-wide box head (v2: after 4 convs
of 32) and 32-wide mask head; v2 with BatchNorm2d in the backbone, FPN and
box and mask heads, and a 2-conv RPN head, as maskrcnn_resnet50_fpn_v2),
then randomises every weight, BatchNorm statistic and head so that the
outputs are not trivial (the class scores are spread enough for detections
above 0.05). Runs torchvision's own modules on
a normalised 2 x 3 x S x S batch whose second image is padded (its right
and bottom parts are zero), and writes:

- OUT.safetensors: the state dict (float32; for the reduced model every
  value is rounded to float16 before the run and stored as float16, so the
  file stays small and still holds exactly the weights that ran);
- OUT.npz: the input (NCHW, float16-exact values), the FPN levels (NCHW),
  the RPN objectness [B, H*W*A] and deltas [B, H*W*A, 4] per level, each
  image's proposals, the detections (boxes, scores, labels) and their
  masks pasted by paste_masks_in_image at the input size (> 0.5, packed
  bits along the width).

Every image's size is given as the full S x S to torchvision, as our model
clips to the padded input size.
"""

import argparse
import pathlib

import numpy as np
import torch
import torchvision
from safetensors.torch import save_file
from torch import nn
from torchvision.models.detection import mask_rcnn, roi_heads
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.detection.faster_rcnn import (
    FastRCNNConvFCHead,
    FastRCNNPredictor,
    TwoMLPHead,
)
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.rpn import RPNHead
from torchvision.ops import misc

# The reduced model: widths that keep the architecture (module types,
# levels, anchors, pooler) but make the file small.
REDUCED = {
    "stem": 16,
    "fpn": 32,
    "box_head": 64,
    "box_head_conv": 32,
    "mask_head": 32,
}
NUM_CLASSES = 91


def _reduced_model(version: str) -> nn.Module:
    v2 = version == "v2"
    # v1: FrozenBatchNorm2d in the backbone, no norm elsewhere; v2:
    # BatchNorm2d everywhere but the RPN head.
    norm = nn.BatchNorm2d if v2 else misc.FrozenBatchNorm2d
    head_norm = nn.BatchNorm2d if v2 else None
    width = REDUCED["stem"]
    net = torchvision.models.resnet.ResNet(
        torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], norm_layer=norm
    )
    net.inplanes = width
    net.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
    net.bn1 = norm(width)
    block = torchvision.models.resnet.BasicBlock
    net.layer1 = net._make_layer(block, width, 1)
    net.layer2 = net._make_layer(block, 2 * width, 1, stride=2)
    net.layer3 = net._make_layer(block, 4 * width, 1, stride=2)
    net.layer4 = net._make_layer(block, 8 * width, 1, stride=2)
    channels = REDUCED["fpn"]
    backbone = BackboneWithFPN(
        net,
        {f"layer{i}": str(i - 1) for i in range(1, 5)},
        [width, 2 * width, 4 * width, 8 * width],
        channels,
        norm_layer=head_norm,
    )
    pool = 7
    if v2:
        box_head = FastRCNNConvFCHead(
            (channels, pool, pool),
            [REDUCED["box_head_conv"]] * 4,
            [REDUCED["box_head"]],
            norm_layer=head_norm,
        )
    else:
        box_head = TwoMLPHead(channels * pool * pool, REDUCED["box_head"])
    return mask_rcnn.MaskRCNN(
        backbone,
        num_classes=None,
        rpn_head=RPNHead(channels, 3, conv_depth=2 if v2 else 1),
        box_head=box_head,
        box_predictor=FastRCNNPredictor(REDUCED["box_head"], NUM_CLASSES),
        mask_head=mask_rcnn.MaskRCNNHeads(
            channels, [REDUCED["mask_head"]] * 4, 1, norm_layer=head_norm
        ),
        mask_predictor=mask_rcnn.MaskRCNNPredictor(
            REDUCED["mask_head"], REDUCED["mask_head"], NUM_CLASSES
        ),
    )


_FULL = {
    "v1": torchvision.models.detection.maskrcnn_resnet50_fpn,
    "v2": torchvision.models.detection.maskrcnn_resnet50_fpn_v2,
}


def build(width: str, version: str = "v1") -> nn.Module:
    """torchvision's Mask R-CNN v1 or v2, 'full' or 'reduced', in eval mode.

    v1's BatchNorm epsilon is 0, as maskrcnn_resnet50_fpn sets it
    (overwrite_eps) when it loads the COCO_V1 weights; v2 keeps 1e-5.
    """
    if width == "full":
        model = _FULL[version](weights=None, weights_backbone=None)
    else:
        model = _reduced_model(version)
    if version == "v1":
        for module in model.modules():
            if isinstance(module, misc.FrozenBatchNorm2d | nn.BatchNorm2d):
                module.eps = 0.0
    return model.eval()


# Output std of the randomised heads (by module name suffix): spread class
# scores (some above 0.05 of 91 classes), moderate deltas and masks. v2's
# box head fc (FastRCNNConvFCHead's Linear, "box_head.5") reads
# BatchNorm-ed ReLU outputs, several times smaller than v1's fc7 input.
_HEAD_GAIN = {
    "cls_logits": 2.0,
    "bbox_pred": 0.5,
    "cls_score": 2.0,
    "mask_fcn_logits": 3.0,
    "box_head.5": 12.0,
}

_ZERO_MEAN = ("cls_score", "mask_fcn_logits")


def randomise(model: nn.Module, seed: int, half: bool) -> None:
    """Every weight, bias and BatchNorm statistic drawn anew."""
    generator = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=generator) * std

    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Conv2d | nn.Linear | nn.ConvTranspose2d):
                weight = module.weight
                if isinstance(module, nn.ConvTranspose2d):
                    fan_in = weight.shape[0]
                else:
                    fan_in = weight[0].numel()
                gain = next(
                    (g for k, g in _HEAD_GAIN.items() if name.endswith(k)), 1.0
                )
                weight.copy_(normal(weight.shape, gain * np.sqrt(1 / fan_in)))
                if name.endswith(_ZERO_MEAN):
                    # Inputs after a ReLU are positive: zero-mean rows keep
                    # one class (or mask level) from winning everywhere.
                    flat = weight.view(weight.shape[0], -1)
                    flat -= flat.mean(dim=1, keepdim=True)
                if module.bias is not None:
                    module.bias.copy_(normal(module.bias.shape, 0.1))
            elif isinstance(module, misc.FrozenBatchNorm2d | nn.BatchNorm2d):
                c = module.weight.shape[0]
                module.weight.copy_(
                    0.3 + 0.4 * torch.rand(c, generator=generator)
                )
                module.bias.copy_(normal((c,), 0.1))
                module.running_mean.copy_(normal((c,), 0.1))
                module.running_var.copy_(
                    0.5 + 1.5 * torch.rand(c, generator=generator)
                )
        if half:
            for tensor in model.state_dict().values():
                if tensor.is_floating_point():
                    tensor.copy_(tensor.half().float())


def make_input(size: int, seed: int) -> np.ndarray:
    """Normalised f32[2, 3, S, S]; image 1 padded right and down with 0."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((2, 3, size, size)).astype(np.float32)
    # Smooth blobs so that features vary at every level.
    yy, xx = np.mgrid[:size, :size] / size
    for b in range(2):
        for _ in range(6):
            cy, cx, r = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), 0.1
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            images[b] += 3 * blob * rng.standard_normal((3, 1, 1))
    valid_h, valid_w = size * 3 // 4, size * 5 // 8
    images[1, :, valid_h:, :] = 0.0
    images[1, :, :, valid_w:] = 0.0
    return images.astype(np.float16).astype(np.float32)


def _per_level_rpn(head_out, batch):
    logits, deltas = head_out
    flat_logits = [
        x.permute(0, 2, 3, 1).reshape(batch, -1).numpy() for x in logits
    ]
    flat_deltas = []
    for x in deltas:
        n, c, h, w = x.shape
        x = x.view(n, c // 4, 4, h, w).permute(0, 3, 4, 1, 2)
        flat_deltas.append(x.reshape(n, -1, 4).numpy())
    return flat_logits, flat_deltas


@torch.no_grad()
def run(model: nn.Module, images: np.ndarray) -> dict[str, np.ndarray]:
    """torchvision's outputs at every stage, by name (module docstring)."""
    x = torch.from_numpy(images)
    batch, _, height, width = x.shape
    sizes = [(height, width)] * batch
    features = model.backbone(x)
    levels = list(features.values())
    out = {"images": images.astype(np.float16)}  # exact: see make_input
    for i, level in enumerate(levels):
        out[f"fpn_{i}"] = level.numpy()
    logits, deltas = _per_level_rpn(model.rpn.head(levels), batch)
    for i, (lo, de) in enumerate(zip(logits, deltas, strict=True)):
        out[f"rpn_logits_{i}"], out[f"rpn_deltas_{i}"] = lo, de
    proposals, _ = model.rpn(ImageList(x, sizes), features)
    detections, _ = model.roi_heads(features, proposals, sizes)
    for b in range(batch):
        found = detections[b]
        out[f"proposals_{b}"] = proposals[b].numpy()
        out[f"boxes_{b}"] = found["boxes"].numpy()
        out[f"scores_{b}"] = found["scores"].numpy()
        out[f"labels_{b}"] = found["labels"].numpy()
        pasted = roi_heads.paste_masks_in_image(
            found["masks"], found["boxes"], (height, width), padding=1
        )
        out[f"pasted_{b}"] = np.packbits(pasted[:, 0].numpy() > 0.5, axis=-1)
    return out


def write(
    out: pathlib.Path, width: str, size: int, seed: int, version: str = "v1"
) -> None:
    """OUT.safetensors and OUT.npz (module docstring)."""
    torch.manual_seed(seed)
    model = build(width, version)
    randomise(model, seed, half=width == "reduced")
    outputs = run(model, make_input(size, seed))
    out.parent.mkdir(parents=True, exist_ok=True)
    half = width == "reduced"  # the values are float16-exact then
    state = {
        k: (v.half() if half and v.is_floating_point() else v).contiguous()
        for k, v in model.state_dict().items()
    }
    save_file(state, str(out.with_suffix(".safetensors")))
    np.savez_compressed(out.with_suffix(".npz"), **outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument(
        "--width", choices=("full", "reduced"), default="reduced"
    )
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--version", choices=("v1", "v2"), default="v1")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    write(args.out, args.width, args.size, args.seed, args.version)


if __name__ == "__main__":
    main()
