"""export.py's artifact against the in-process model, and what it holds."""

import json
import pathlib

import jax
import numpy as np
import pytest

from detector import config as config_lib
from detector.export import exporter, in_process
from detector.imaging import images
from detector.launch import cli
from detector.predict import artifact, artifact_meta, runner
from tests.helpers import groups, predict_workdir

pytestmark = groups.EXPORTED


def _batch(count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` letterboxed random images of assorted sizes: (images,
    resized sizes, original sizes)."""
    rng = np.random.default_rng(seed)
    sizes = [(97, 203), (300, 150), (128, 128), (40, 61)][:count]
    pictures = [rng.integers(0, 256, (*hw, 3), np.uint8) for hw in sizes]
    resize = images.Resize("letterbox")
    resized = [images.fitted_size(hw, resize, (128, 128)) for hw in sizes]
    return (
        np.stack(
            [
                images.place(p, size, (128, 128))
                for p, size in zip(pictures, resized, strict=True)
            ]
        ),
        np.asarray(resized, np.int32),
        np.asarray(sizes, np.int32),
    )


@pytest.mark.parametrize(
    "count, seed",
    # Batch 1 by default; batch 3 (one more compile on each side) behind
    # -m slow: test_predict.py runs the artifact at another batch size.
    [(1, 0), pytest.param(3, 1, marks=pytest.mark.slow)],
)
def test_exported_equals_in_process_on_cpu(
    trained_workdir, exported_dir, count, seed
):
    """One artifact (symbolic batch) and the in-process model give the
    same outputs on CPU, bit for bit, at batch `count`."""
    cpu = jax.devices("cpu")[0]
    loaded = artifact.load(exported_dir)
    config = config_lib.load_json(trained_workdir / "config.json")
    local = in_process.predictor(config, trained_workdir)
    with jax.default_device(cpu):
        batch, resized, sizes = _batch(count, seed)
        exported = artifact.run(loaded, batch, resized, sizes)
        expected = local.run(batch, resized, sizes)
        assert set(exported) == set(artifact.OUTPUTS)
        # Untrained weights at score threshold 0 fill (nearly) every
        # slot; each box is inside its image and not empty.
        assert (exported["num_valid"] >= 15).all()
        for key in artifact.OUTPUTS:
            assert exported[key].shape[0] == count
            np.testing.assert_array_equal(
                exported[key], expected[key], err_msg=key
            )
        for i, count_i in enumerate(exported["num_valid"]):
            boxes = exported["boxes"][i, :count_i]
            assert (boxes[:, 2] > boxes[:, 0]).all()
            assert (boxes[:, 3] > boxes[:, 1]).all()
            assert (boxes[:, :2] >= 0).all()
            assert (boxes[:, 2] <= sizes[i, 1]).all()
            assert (boxes[:, 3] <= sizes[i, 0]).all()
            assert not exported["boxes"][i, count_i:].any()


def test_meta_and_multi_platform_module(exported_dir):
    meta = json.loads((exported_dir / artifact.META_FILE).read_text())
    assert set(artifact.REQUIRED_KEYS) <= set(meta)
    assert meta["format_version"] == 3
    assert meta["canvases"] == [[128, 128]]
    size = (exported_dir / artifact.ARTIFACT_FILE).stat().st_size
    assert len(meta["canvas_bytes"]) == 1
    assert meta["canvas_bytes"][0] + meta["weights_bytes"] == size
    assert meta["resize"] == {
        "rule": "letterbox",
        "min_size": 800,
        "max_size": 1333,
    }
    assert meta["batch_sizes"] == "b"
    assert meta["bound_sha256"] == artifact_meta.bound_digests(meta)
    assert meta["checkpoint_step"] == predict_workdir.STEP
    assert meta["platforms"] == ["cpu", "cuda", "tpu"]
    assert [c["name"] for c in meta["categories"]] == [
        "circle",
        "rectangle",
        "triangle",
    ]
    assert meta["pixel_mean"] == [123.675, 116.28, 103.53]
    assert meta["jax_version"] == jax.__version__
    assert meta["nms_backend"]["tpu"] == {
        "rpn": "pallas",
        "detection": "pallas",
    }
    assert meta["nms_backend"]["cpu"] == {
        "rpn": "pallas",
        "detection": "pallas",
    }
    loaded = artifact.load(exported_dir)
    assert loaded.platforms == ("cpu", "cuda", "tpu")
    (function,) = loaded.functions
    # The function takes the weights (f32 leaves) before its three inputs.
    assert sum(w.nbytes for w in loaded.weights) == meta["weights_bytes"]
    assert [w.shape for w in loaded.weights] == [
        a.shape for a in function.in_avals[:-3]
    ]
    module = function.mlir_module()
    # The Mosaic NMS kernel, once per NMS site, in the TPU lowering.
    assert module.count("tpu_custom_call") >= 2
    assert "nms_tiled_tpu" in module


@pytest.mark.parametrize(
    "nms,message",
    [
        ("cpu", "--nms=cpu: the cpu NMS backend runs on the host"),
        (None, None),
    ],
)
def test_host_nms_cannot_be_exported(nms, message):
    config = predict_workdir.config(pathlib.Path("/tmp"))
    if nms:
        cli.set_nms_backend(config, nms)
        with pytest.raises(ValueError, match=message) as error:
            exporter.nms_per_platform(config, ("cpu", "tpu"), nms)
        assert "host callbacks cannot be exported; use --nms=pallas, " in str(
            error.value
        )
        return
    config.model.rpn.nms_backend = "cpu"  # from a config, not the flag
    with pytest.raises(
        ValueError, match=r"config.model.rpn.nms_backend='cpu': the cpu NMS"
    ):
        exporter.nms_per_platform(config, ("cpu",))


def test_bad_platforms():
    with pytest.raises(ValueError, match="--platforms=cpu,gpu: name each of"):
        exporter.check_platforms(("cpu", "gpu"))
    with pytest.raises(ValueError, match="--platforms=cpu,cpu"):
        exporter.check_platforms(("cpu", "cpu"))


def test_predictor_reads_artifact_categories(exported_dir):
    predictor = runner.artifact_predictor(artifact.load(exported_dir))
    assert predictor.canvases == ((128, 128),)
    assert predictor.categories[0] == {"id": 1, "name": "circle"}


def test_an_unwritable_out_fails_before_the_checkpoint_loads(
    tmp_path, monkeypatch
):
    """The checkpoint is never read: `served` would fail the test."""
    config = predict_workdir.config(tmp_path / "run")
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(exporter, "served", _never_called)
    with pytest.raises(ValueError) as error:
        exporter.export_workdir(
            config, tmp_path / "run", tmp_path / "file" / "export"
        )
    assert str(error.value) == (
        f"--out={tmp_path / 'file' / 'export'}: {tmp_path / 'file'} is a "
        "file, not a folder; name a folder to write into"
    )
    assert not (tmp_path / "run").exists()


def _never_called(*args, **kwargs):
    raise AssertionError("the checkpoint was read")


def test_summary_names_the_platforms_and_their_nms_backend():
    meta = {
        "checkpoint_step": 3,
        "canvases": [[832, 1344], [1344, 832]],
        "platforms": ["cpu", "cuda"],
        "nms_backend": {
            "cpu": {"rpn": "pallas", "detection": "pallas"},
            "cuda": {"rpn": "pallas", "detection": "while_loop"},
        },
    }
    assert exporter.summary(meta, pathlib.Path("w/export")) == (
        "exported step 3 to w/export (canvases 832 x 1344, 1344 x 832) for "
        "cpu, cuda; NMS backend on cpu: pallas, on cuda: pallas/while_loop"
    )
    meta["canvases"] = [[128, 128]]
    assert exporter.summary(meta, pathlib.Path("w/export")).startswith(
        "exported step 3 to w/export (canvas 128 x 128) for cpu, cuda;"
    )
