"""detector/weights/backbone_weights.py: torchvision-named ResNet weights.

The state dicts here are written from random numbers with torchvision's
ResNet names and shapes, derived from its architecture (below), not from
the module under test.
"""

import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from detector import config as config_lib
from detector import factory
from detector.modeling import backbone, norms
from detector.state import warm_start
from tests.helpers import torch_process

# torchvision.models.resnet: blocks per stage, bottleneck (expansion 4).
_TORCHVISION = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
}
_EPS = 1e-5  # torchvision's BatchNorm2d / FrozenBatchNorm2d epsilon


def torchvision_state_dict(name: str, seed: int = 0) -> dict:
    """Random arrays under torchvision's ResNet state-dict names/shapes."""
    rng = np.random.default_rng(seed)
    depths, bottleneck = _TORCHVISION[name]
    expansion = 4 if bottleneck else 1
    state = {}

    def conv(key, out, inp, k):
        std = np.sqrt(2.0 / (k * k * out))  # kaiming_normal_, fan_out
        state[f"{key}.weight"] = (
            rng.standard_normal((out, inp, k, k), np.float32) * std
        ).astype(np.float32)

    def bn(key, c):
        state[f"{key}.weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        state[f"{key}.bias"] = rng.normal(0, 0.1, c).astype(np.float32)
        state[f"{key}.running_mean"] = rng.normal(0, 0.1, c).astype(np.float32)
        state[f"{key}.running_var"] = rng.uniform(0.5, 2.0, c).astype(
            np.float32
        )
        state[f"{key}.num_batches_tracked"] = np.array(100, np.int64)

    conv("conv1", 64, 3, 7)
    bn("bn1", 64)
    inplanes = 64
    for i, (planes, blocks) in enumerate(
        zip((64, 128, 256, 512), depths, strict=True)
    ):
        for b in range(blocks):
            stride = 2 if i > 0 and b == 0 else 1
            key = f"layer{i + 1}.{b}"
            widths = (
                [
                    (planes, inplanes, 1),
                    (planes, planes, 3),
                    (planes * 4, planes, 1),
                ]
                if bottleneck
                else [(planes, inplanes, 3), (planes, planes, 3)]
            )
            for j, (out, inp, k) in enumerate(widths, start=1):
                conv(f"{key}.conv{j}", out, inp, k)
                bn(f"{key}.bn{j}", out)
            if b == 0 and (stride != 1 or inplanes != planes * expansion):
                conv(f"{key}.downsample.0", planes * expansion, inplanes, 1)
                bn(f"{key}.downsample.1", planes * expansion)
            inplanes = planes * expansion
    state["fc.weight"] = rng.normal(0, 0.01, (1000, inplanes)).astype(
        np.float32
    )
    state["fc.bias"] = np.zeros(1000, np.float32)
    return state


def _model_config(name, norm="frozen_batch", path="", max_level=5):
    config = config_lib.base_config()
    config.model.backbone, config.model.norm = name, norm
    config.model.backbone_init = str(path)
    config.model.max_level = max_level
    return config


class _Holder(nnx.Module):
    """The backbone under the attribute the full model uses."""

    def __init__(self, model, rngs):
        self.backbone, _ = factory.build_backbone(model, rngs=rngs)


def _loaded(
    config, build=lambda m: nnx.eval_shape(lambda: _Holder(m, nnx.Rngs(0)))
):
    """The backbone with config.model.backbone_init applied to zeros."""
    graphdef, params, rest = nnx.split(build(config.model), nnx.Param, ...)
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), (params, rest))
    return nnx.merge(graphdef, *warm_start.apply(config, *zeros)).backbone


def _variable(module, torch_name):
    """(our variable, conversion) of a torchvision name, by parsing it."""
    *parts, field = torch_name.split(".")
    if parts[0] in ("conv1", "bn1"):
        layer, kind = module.stem, parts[0][:-1]
    else:
        block = module.stages[int(parts[0][5:]) - 1][int(parts[1])]
        if parts[2] == "downsample":
            layer = block.shortcut
            kind = "conv" if parts[3] == "0" else "bn"
        else:
            kind, j = re.fullmatch(r"(conv|bn)(\d)", parts[2]).groups()
            layer = block.layers[int(j) - 1]
    if kind == "conv":
        return layer.conv.kernel, lambda w: w.transpose(2, 3, 1, 0)
    norm = layer.norm
    return {
        "weight": norm.scale,
        "bias": norm.bias,
        "running_mean": norm.mean,
        "running_var": norm.var,
    }[field], None


@pytest.mark.parametrize(
    "name,norm", [("resnet50", "frozen_batch"), ("resnet18", "batch")]
)
def test_every_variable_equals_its_source(name, norm, tmp_path, caplog):
    state = torchvision_state_dict(name)
    path = tmp_path / f"{name}.safetensors"
    save_file(state, path)
    with caplog.at_level("INFO"):
        module = _loaded(_model_config(name, norm, path))
    used = [
        k
        for k in state
        if not k.startswith("fc.") and not k.endswith("num_batches_tracked")
    ]
    for key in used:
        variable, convert = _variable(module, key)
        want = convert(state[key]) if convert else state[key]
        np.testing.assert_array_equal(
            np.asarray(variable[...]), want, err_msg=key
        )
    # Nothing of the backbone kept its (zero) initial value.
    leaves = jax.tree.leaves(nnx.state(module))
    assert len(leaves) == len(used)
    assert all(np.any(np.asarray(leaf) != 0) for leaf in leaves)
    counters = sum(k.endswith("num_batches_tracked") for k in state)
    assert (
        f"backbone_init: {len(used)} tensors loaded from {path}, "
        f"ignored: fc.weight, fc.bias, {counters} BatchNorm "
        "num_batches_tracked counters\n"
    ) in caplog.text


def test_resnet101_is_a_depth_entry(tmp_path):
    path = tmp_path / "resnet101.npz"
    state = torchvision_state_dict("resnet101")
    np.savez(path, **state)
    module = _loaded(_model_config("resnet101", path=path))
    assert len(module.stages[2]) == 23
    np.testing.assert_array_equal(
        np.asarray(module.stages[2][22].layers[2].norm.var[...]),
        state["layer3.22.bn3.running_var"],
    )


def _numpy_conv(x, w, stride, pad):
    """NCHW conv with OIHW weights (torch's layout), float64."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_c, _, kh, kw = w.shape
    h = (x.shape[2] - kh) // stride + 1
    wd = (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], out_c, h, wd))
    for i in range(kh):
        for j in range(kw):
            patch = x[
                :, :, i : i + stride * h : stride, j : j + stride * wd : stride
            ]
            out += np.einsum("bchw,oc->bohw", patch, w[:, :, i, j])
    return out


def _numpy_frozen_bn(x, state, key):
    scale = state[f"{key}.weight"] / np.sqrt(state[f"{key}.running_var"] + _EPS)
    shift = state[f"{key}.bias"] - state[f"{key}.running_mean"] * scale
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def _relu(x):
    return np.maximum(x, 0.0)


def _numpy_stem_and_first_block(x, state):
    x = _relu(
        _numpy_frozen_bn(
            _numpy_conv(x, state["conv1.weight"], 2, 3), state, "bn1"
        )
    )
    padded = np.pad(
        x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf
    )
    h, w = (x.shape[2] + 2 - 3) // 2 + 1, (x.shape[3] + 2 - 3) // 2 + 1
    x = np.max(
        [
            padded[:, :, i : i + 2 * h : 2, j : j + 2 * w : 2]
            for i in range(3)
            for j in range(3)
        ],
        axis=0,
    )
    y = x
    for j, pad in enumerate((0, 1, 0), start=1):
        y = _numpy_frozen_bn(
            _numpy_conv(y, state[f"layer1.0.conv{j}.weight"], 1, pad),
            state,
            f"layer1.0.bn{j}",
        )
        y = _relu(y) if j < 3 else y
    shortcut = _numpy_frozen_bn(
        _numpy_conv(x, state["layer1.0.downsample.0.weight"], 1, 0),
        state,
        "layer1.0.downsample.1",
    )
    return _relu(y + shortcut)


def test_stem_and_first_bottleneck_match_numpy(tmp_path):
    # CPU, float32 activations: our forward within 1e-5 of float64 numpy.
    state = torchvision_state_dict("resnet50", seed=1)
    path = tmp_path / "resnet50.safetensors"
    save_file(state, path)
    # Levels 2 only: the stem and stage 1 are built, the rest ignored.
    config = _model_config("resnet50", path=path, max_level=2)
    config.model.min_level = 2
    config.model.dtype = "float32"  # 'auto' is bfloat16 on a GPU host
    images = np.random.default_rng(2).normal(size=(2, 3, 32, 32))
    graphdef, variables = nnx.split(_loaded(config))

    @jax.jit
    def stem_and_first_block(variables, images):
        module = nnx.merge(graphdef, variables)
        x = nnx.max_pool(
            module.stem(images),
            (3, 3),
            strides=(2, 2),
            padding=((1, 1), (1, 1)),
        )
        return module.stages[0][0](x)

    with jax.default_device(jax.devices("cpu")[0]):
        ours = np.asarray(
            stem_and_first_block(
                variables,
                jnp.asarray(images.transpose(0, 2, 3, 1), jnp.float32),
            )
        ).transpose(0, 3, 1, 2)
    want = _numpy_stem_and_first_block(images, state)
    assert ours.shape == want.shape == (2, 256, 8, 8)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)


def _error(config, match, error=ValueError):
    with pytest.raises(error, match=match):
        _loaded(config)


def test_missing_file_is_one_line(tmp_path):
    _error(
        _model_config("resnet50", path=tmp_path / "r50.safetensors"),
        r"^config\.model\.backbone_init='.*r50\.safetensors': no such "
        r"file; docs/coco\.md says where to get it, or start from random "
        r"weights with --config\.model\.backbone_init=''$",
        FileNotFoundError,
    )


def test_wrong_depth_names_the_first_mismatch_and_both_shapes(tmp_path):
    path = tmp_path / "resnet18.safetensors"
    save_file(torchvision_state_dict("resnet18"), path)
    _error(
        _model_config("resnet50", path=path),
        r"resnet18\.safetensors': layer1\.0\.conv1\.weight has shape "
        r"\(64, 64, 3, 3\), but resnet50 \(backbone_width=64\) needs "
        r"\(64, 64, 1, 1\)$",
    )


def test_unknown_and_missing_names_are_listed(tmp_path):
    state = torchvision_state_dict("resnet18")
    extra = dict(
        state,
        **{
            "head.weight": np.ones(2, np.float32),
            "module.conv1.weight": np.ones(2, np.float32),
        },
    )
    save_file(extra, tmp_path / "extra.safetensors")
    _error(
        _model_config("resnet18", path=tmp_path / "extra.safetensors"),
        r"': 2 unknown names for resnet18: head\.weight, "
        r"module\.conv1\.weight$",
    )
    del state["layer4.1.bn2.running_var"], state["conv1.weight"]
    save_file(state, tmp_path / "short.safetensors")
    _error(
        _model_config("resnet18", path=tmp_path / "short.safetensors"),
        r"': 2 names of resnet18 missing: conv1\.weight, "
        r"layer4\.1\.bn2\.running_var$",
    )


def test_group_norm_cannot_take_batch_norm_statistics(tmp_path):
    path = tmp_path / "resnet18.safetensors"
    save_file(torchvision_state_dict("resnet18"), path)
    _error(
        _model_config("resnet18", "group", path),
        r"holds BatchNorm statistics \(running_mean, running_var\), which "
        r"model\.norm='group' cannot take",
    )


def test_unreadable_and_unknown_files_are_one_line(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"not safetensors")
    _error(
        _model_config("resnet18", path=tmp_path / "bad.safetensors"),
        r"bad\.safetensors': not a readable \.safetensors file \(.+\)$",
    )
    (tmp_path / "weights.h5").write_bytes(b"")
    _error(
        _model_config("resnet18", path=tmp_path / "weights.h5"),
        r"weights\.h5': unknown file type '\.h5'; known: \.safetensors, "
        r"\.npz, \.pth, \.pt$",
    )


def test_non_finite_weights_name_the_file_and_first_bad_tensor(tmp_path):
    state = torchvision_state_dict("resnet18")
    state["layer2.0.conv1.weight"][0, 0, 0, 0] = np.inf
    state["layer3.1.bn2.weight"][3] = np.nan
    save_file(state, tmp_path / "r18.safetensors")
    _error(
        _model_config("resnet18", path=tmp_path / "r18.safetensors"),
        r"^config\.model\.backbone_init='.*r18\.safetensors': "
        r"layer2\.0\.conv1\.weight holds 1 non-finite values \(first: inf\)",
    )


def test_negative_running_variance_names_the_tensor(tmp_path):
    state = torchvision_state_dict("resnet18")
    state["layer1.1.bn1.running_var"][5] = -0.25
    save_file(state, tmp_path / "r18.safetensors")
    _error(
        _model_config("resnet18", path=tmp_path / "r18.safetensors"),
        r"r18\.safetensors': layer1\.1\.bn1\.running_var holds negative "
        r"running variances \(min -0\.25\)",
    )


def test_data_parallel_prefix_is_stripped_with_a_log_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    state = torchvision_state_dict("resnet18")
    wrapped = {f"module.{name}": value for name, value in state.items()}
    save_file(wrapped, tmp_path / "ddp.safetensors")
    module = _loaded(
        _model_config("resnet18", path=tmp_path / "ddp.safetensors")
    )
    np.testing.assert_array_equal(
        np.asarray(module.stem.conv.kernel[...]),
        state["conv1.weight"].transpose(2, 3, 1, 0),
    )
    assert "stripped the DataParallel prefix 'module.'" in caplog.text


@torch_process.imports_torch
def test_pth_is_read_directly_when_torch_is_installed(tmp_path):
    import torch

    state = torchvision_state_dict("resnet18")
    torch.save(
        {k: torch.from_numpy(v) for k, v in state.items()},
        tmp_path / "resnet18.pth",
    )
    module = _loaded(_model_config("resnet18", path=tmp_path / "resnet18.pth"))
    np.testing.assert_array_equal(
        np.asarray(module.stem.conv.kernel[...]),
        state["conv1.weight"].transpose(2, 3, 1, 0),
    )


def test_freeze_at_stops_gradients_at_the_frozen_stages():
    config = _model_config("tiny", "batch")
    config.model.freeze_at = 2
    config.model.backbone_width = 8

    def build():
        module = factory.build_backbone(config.model, rngs=nnx.Rngs(0))[0]
        module.eval()  # running statistics: nothing to update
        return module

    module = nnx.eval_shape(build)
    # A frozen stage's BatchNorm becomes FrozenBatchNorm (no batch stats).
    assert isinstance(module.stem.norm, norms.FrozenBatchNorm)
    assert isinstance(module.stages[0][0].layers[0].norm, norms.FrozenBatchNorm)
    assert isinstance(module.stages[1][0].layers[0].norm, nnx.BatchNorm)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    rng = np.random.default_rng(0)  # positive values: valid variances too
    params, rest = jax.tree.map(
        lambda x: rng.uniform(0.5, 1.5, x.shape).astype(x.dtype), (params, rest)
    )

    def loss(params, images):
        features = nnx.merge(graphdef, params, rest)(images)
        return sum(jnp.sum(f**2) for f in features.values())

    grads = jax.jit(jax.grad(loss))(params, jnp.ones((1, 32, 32, 3)))
    frozen = backbone.frozen_prefixes(
        config.model.backbone, config.model.freeze_at
    )
    assert frozen == ("backbone/stem", "backbone/stages/0")
    for name, grad in warm_start.flat(grads).items():
        is_frozen = name.startswith(("stem/", "stages/0/"))
        assert np.any(np.asarray(grad) != 0) != is_frozen, name
