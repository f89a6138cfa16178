"""torchvision's maskrcnn_resnet50_fpn_v2 weights through
model.init_checkpoint, with configs/coco_r50_fpn.py:torchvision_v2.

The committed fixture (data/torchvision_maskrcnn_v2.*, written by
make_torchvision_fixture.py --version=v2: a reduced v2 Mask R-CNN, with
BatchNorm2d in the backbone, FPN and box and mask heads, a 2-conv RPN
head and a 4conv1fc box head, randomised weights and statistics, the same
2 x 3 x 192 x 192 input as v1's fixture and torchvision 0.29.1's eval-mode
outputs) is compared in the default suite without torch; the tests marked
`torch` rebuild it, and the full-width R50 v2 at 512 x 512, in a child
process. The harness and tolerances are v1's
(test_torchvision_maskrcnn.py); measured on the reduced fixture (CPU,
float32): FPN and RPN outputs <= 1e-6 relative, 100% of the proposals and
of the 200 detections matched, score difference 1e-7, mask IoU 1.0.
"""

import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file

from configs import coco_r50_fpn
from detector import factory
from detector.launch.validate import validate
from detector.modeling import norms
from detector.weights import torchvision_maskrcnn as tv
from tests.detector.weights import test_torchvision_maskrcnn as v1
from tests.helpers import torch_process
from tests.helpers import torchvision_parity as parity

FIXTURE = v1.DATA / "torchvision_maskrcnn_v2"
VARIANT = "torchvision_v2"
# torchvision: sum(p.numel() for p in maskrcnn_resnet50_fpn_v2().parameters())
TORCHVISION_V2_PARAMS = 46_359_409


@pytest.mark.slow  # one CPU compile of predict: ~60 s on 2 cores
def test_reduced_v2_model_matches_torchvision_fixture():
    model = parity.our_model(
        FIXTURE.with_suffix(".safetensors"),
        size=v1.SIZE,
        width="reduced",
        variant=VARIANT,
    )
    v1._check(parity.measure(model, np.load(FIXTURE.with_suffix(".npz"))))


def test_the_variant_has_torchvision_v2_parameters():
    """Ours (90 classes) + the 91st class rows of torchvision's heads + the
    affine terms of the BatchNorms freeze_at=2 holds as frozen statistics
    (stem and C2: 1472 channels) = torchvision's count."""
    config = coco_r50_fpn.get_config(VARIANT)
    config.data.num_classes = 90
    validate(config)
    model = nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )
    ours = sum(x.size for x in _leaves(model, nnx.Param))
    frozen_affine = sum(
        x.size
        for path, x in nnx.to_flat_state(nnx.state(model, norms.FrozenStat))
        if path[-1] in ("scale", "bias")
    )
    assert frozen_affine == 2 * 1472
    background_rows = 4 * (1024 + 1) + (256 + 1)  # bbox_pred, mask logits
    assert ours + frozen_affine + background_rows == TORCHVISION_V2_PARAMS


def _leaves(model, kind):
    return [x for _, x in nnx.to_flat_state(nnx.state(model, kind))]


def test_every_v2_tensor_maps_and_batch_norm_statistics_arrive(tmp_path):
    state = load_file(FIXTURE.with_suffix(".safetensors"))
    config = parity.config_for(
        FIXTURE.with_suffix(".safetensors"),
        size=v1.SIZE,
        width="reduced",
        variant=VARIANT,
    )
    arrays = tv.load(FIXTURE.with_suffix(".safetensors"), config, _shapes())
    np.testing.assert_array_equal(
        arrays["fpn/lateral/1/norm/var"],
        state["backbone.fpn.inner_blocks.1.1.running_var"].astype(np.float32),
    )
    np.testing.assert_array_equal(
        arrays["rpn/head/more_convs/0/bias"],
        state["rpn.head.conv.1.0.bias"].astype(np.float32),
    )
    fc = state["roi_heads.box_head.5.weight"].astype(np.float32)
    channels, pool = parity.REDUCED["roi.box_head_conv_dim"], 7
    y, x, c = 2, 6, 9  # our row (y, x, c) is torchvision's c * 49 + y * 7 + x
    np.testing.assert_array_equal(
        arrays["roi_heads/box_head/fc/kernel"][(y * pool + x) * channels + c],
        fc[:, c * pool * pool + y * pool + x],
    )
    assert "roi_heads/mask_head/convs/3/norm/mean" in arrays


def _shapes() -> dict[str, tuple[int, ...]]:
    from detector.state import warm_start

    config = parity.config_for(
        FIXTURE.with_suffix(".safetensors"),
        size=v1.SIZE,
        width="reduced",
        variant=VARIANT,
    )
    abstract = nnx.eval_shape(
        lambda: factory.build_model(config, rngs=nnx.Rngs(0))
    )
    _, params, rest = nnx.split(abstract, nnx.Param, ...)
    return {
        name: tuple(leaf.shape)
        for name, leaf in {
            **warm_start.flat(params),
            **warm_start.flat(rest),
        }.items()
    }


def test_a_v2_file_under_the_v1_layout_is_one_line(tmp_path):
    config = parity.config_for(
        FIXTURE.with_suffix(".safetensors"), size=v1.SIZE, width="reduced"
    )
    with pytest.raises(ValueError) as error:
        tv.load(FIXTURE.with_suffix(".safetensors"), config, _shapes())
    message = str(error.value)
    assert "\n" not in message
    assert "a torchvision maskrcnn_resnet50_fpn_v2 file needs model.norm=" in (
        message
    )


@v1.needs_torch
def test_fixture_script_rewrites_the_committed_v2_fixture(tmp_path):
    """The same weights and input; torchvision's outputs to float error."""
    torch_process.write_fixture(
        tmp_path / "fx", width="reduced", size=v1.SIZE, version="v2"
    )
    weights = load_file(tmp_path / "fx.safetensors")
    committed = load_file(FIXTURE.with_suffix(".safetensors"))
    assert weights.keys() == committed.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, committed[name], name)
    ours, theirs = (
        np.load(p.with_suffix(".npz")) for p in (tmp_path / "fx", FIXTURE)
    )
    assert sorted(ours.files) == sorted(theirs.files)
    for name in ours.files:
        if name.startswith(("fpn_", "rpn_")):
            np.testing.assert_allclose(
                ours[name], theirs[name], rtol=1e-4, atol=1e-5, err_msg=name
            )


@v1.needs_torch
@pytest.mark.slow
def test_full_width_r50_v2_matches_torchvision(tmp_path):
    """maskrcnn_resnet50_fpn_v2 itself, 2 x 3 x 512 x 512, one image
    padded."""
    torch_process.write_fixture(
        tmp_path / "r50", width="full", size=512, version="v2"
    )
    model = parity.our_model(
        tmp_path / "r50.safetensors", size=512, width="full", variant=VARIANT
    )
    v1._check(parity.measure(model, np.load(tmp_path / "r50.npz")))
