"""What imports without TensorFlow, TFDS and pycocotools (GPU images often
lack them): the model, the train step, the configs and the benchmarks. Only
the modules that read data or evaluate may import them."""

import pathlib
import subprocess

import numpy as np

from benchmarks import batch_file
from configs import shapes as shapes_config
from tests.helpers import blocked_imports

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCKED = ("tensorflow", "tensorflow_datasets", "pycocotools")
# Importable with BLOCKED missing.
WITHOUT_DATA_LIBRARIES = (
    "detector.modeling.model",
    "detector.engine.train_step",
    "detector.state.train_state",
    "detector.state.optimizer",
    "detector.distributed.sharding",
    "detector.state.checkpoint",
    "detector.distributed.determinism",
    "ops.nms",
    "ops.host_audit",
    "detector.export.exporter",
    "detector.export.in_process",
    "detector.predict.runner",
    "configs.shapes",
    "configs.coco_r50_fpn",
    "benchmarks.batch_file",
    "benchmarks.nms_bench",
    "benchmarks.step_bench",
)


def _run_blocked(code: str, *args: str) -> subprocess.CompletedProcess:
    """Runs `code` with BLOCKED unimportable, from the repository root."""
    return blocked_imports.run(code, *args, blocked=BLOCKED)


def test_model_step_configs_and_benchmarks_import_without_tf_or_coco():
    assert blocked_imports.blocked_loaded(WITHOUT_DATA_LIBRARIES, BLOCKED) == []


def test_step_bench_reads_a_batch_file_without_tensorflow(tmp_path):
    """--batches loads and checks the file with TF blocked; a file of other
    shapes then stops it with one error line, before anything compiles."""
    config = shapes_config.get_config("runlocal")
    shapes = batch_file.expected_shapes(config)
    batch = {
        key: np.zeros(
            shape,
            np.float32
            if key in ("image", "boxes")
            else np.uint8
            if key == "masks"
            else np.int32
            if key == "classes"
            else bool,
        )
        for key, shape in shapes.items()
    }
    batch["image"] = batch["image"][:, :64]  # not the config's image size
    path = batch_file.save(tmp_path / "b.npz", [batch], config.data)
    result = _run_blocked(
        """
        import runpy
        sys.argv = sys.argv[1:]
        runpy.run_path("benchmarks/step_bench.py", run_name="__main__")
        """,
        "step_bench.py",
        "--config=configs/shapes.py:runlocal",
        f"--batches={path}",
        f"--out={tmp_path}",
    )
    errors = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("error: ")
    ]
    assert result.returncode == 1 and "Traceback" not in result.stderr, (
        result.stderr[-3000:]
    )
    assert errors == [
        (
            f"error: {path}: batch 0 is on a 64 x 128 canvas, the "
            "config's are [(128, 128)] (data.image_size, "
            "data.train_image_size, data.group_orientations); save the "
            "batches with the same config"
        )
    ]
