"""torchvision's Mask R-CNN on photo files, at its own defaults.

    python tests/make_photo_parity_fixture.py --photos=DIR --out=PREFIX

Imports torch, torchvision, PIL and numpy only (torchvision after
TensorFlow in one process crashes on some machines: the parity test runs
this in a child process, tests/helpers/torch_process.py).

Builds make_torchvision_fixture.py's 'reduced' Mask R-CNN v1 (its
architecture shrunk, torchvision's default GeneralizedRCNNTransform:
min_size 800, max_size 1333, size_divisible 32), randomises it the same
way, then sharpens the class head (x SHARPEN) so that detections clear the
0.05 score threshold, and holds the logits of COCO's 10 unused category ids
low (bias UNUSED_BIAS), as trained weights do: a model of COCO's 80 classes
drops those rows, and its softmax then equals torchvision's 91-way one.
Every .jpg of --photos is read as a user would (PIL, EXIF orientation
applied, converted to RGB, to [0, 1] floats) and run alone through
`model.eval()`. Writes:

- PREFIX.safetensors: the state dict (float16: every value was rounded to
  float16 before the run, so the file holds exactly the weights that ran);
- PREFIX.npz: per photo <name>_boxes f32[D, 4] (original pixels),
  <name>_scores f32[D], <name>_labels i64[D] (COCO category ids),
  <name>_masks (torchvision's pasted masks > 0.5, bits packed along the
  width), <name>_size (height, width) and <name>_pixel_sum (the sum of
  the decoded uint8 pixels: the test checks its own decoding against it).
"""

import argparse
import pathlib
import sys

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors.torch import save_file

sys.path.insert(0, str(pathlib.Path(__file__).parent / "detector" / "weights"))
import make_torchvision_fixture as fixture  # noqa: E402

# COCO's category ids that name no category (torchvision's 'N/A' rows).
UNUSED_IDS = (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
SHARPEN = 3.0
UNUSED_BIAS = -40.0


def build(seed: int) -> torch.nn.Module:
    """The reduced model, randomised, class head sharpened (docstring)."""
    torch.manual_seed(seed)
    model = fixture.build("reduced")
    fixture.randomise(model, seed, half=True)
    predictor = model.roi_heads.box_predictor.cls_score
    with torch.no_grad():
        predictor.weight.mul_(SHARPEN)
        predictor.bias[list(UNUSED_IDS)] = UNUSED_BIAS
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())
    return model.eval()


def read(path: pathlib.Path) -> torch.Tensor:
    """A photo as torchvision's users read one: f32[3, h, w] in [0, 1]."""
    with Image.open(path) as image:
        rgb = ImageOps.exif_transpose(image).convert("RGB")
    pixels = torch.from_numpy(np.asarray(rgb).copy())
    return pixels.permute(2, 0, 1).float() / 255.0


@torch.no_grad()
def run(model: torch.nn.Module, photos: pathlib.Path) -> dict:
    out = {}
    for path in sorted(photos.glob("*.jpg")):
        image = read(path)
        (found,) = model([image])
        name = path.stem
        out[f"{name}_boxes"] = found["boxes"].numpy()
        out[f"{name}_scores"] = found["scores"].numpy()
        out[f"{name}_labels"] = found["labels"].numpy()
        out[f"{name}_masks"] = np.packbits(
            found["masks"][:, 0].numpy() > 0.5, axis=-1
        )
        out[f"{name}_size"] = np.asarray(image.shape[1:])
        out[f"{name}_pixel_sum"] = np.int64(
            np.round(image.numpy().astype(np.float64) * 255).sum()
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build(args.seed)
    outputs = run(model, args.photos)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    state = {
        k: (v.half() if v.is_floating_point() else v).contiguous()
        for k, v in model.state_dict().items()
    }
    save_file(state, str(args.out.with_suffix(".safetensors")))
    np.savez_compressed(args.out.with_suffix(".npz"), **outputs)


if __name__ == "__main__":
    main()
