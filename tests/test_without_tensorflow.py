"""TensorFlow is a training-input dependency only: eval.py, export.py and
predict.py on a COCO-format folder run with TensorFlow and TFDS not
importable (the TFDS source still needs them: docs/training.md)."""

import pathlib
import shutil
import subprocess

import pytest

from detector import config as config_lib
from tests.helpers import blocked_imports, groups

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCKED = ("tensorflow", "tensorflow_datasets")
# What eval.py, export.py and predict.py import beyond their entry points.
INFERENCE_MODULES = (
    "detector.evaluation.eval_lib",
    "detector.evaluation.curves",
    "detector.data.eval_split",
    "detector.export.exporter",
    "detector.export.in_process",
    "detector.launch.validate",
    "detector.launch.run_config",
)


def test_the_inference_modules_import_without_tensorflow():
    assert blocked_imports.blocked_loaded(INFERENCE_MODULES, BLOCKED) == []


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    """`python <name> <args>` with BLOCKED unimportable."""
    return blocked_imports.run(
        f"""
        import runpy
        sys.argv = sys.argv[1:]
        runpy.run_path({name!r}, run_name="__main__")
        """,
        name,
        *args,
        blocked=BLOCKED,
        timeout=1200,
    )


@pytest.mark.slow
@groups.GROUPED_EXPORTED
def test_eval_export_and_predict_run_without_tensorflow(
    grouped_workdir, tmp_path
):
    pytest.importorskip("pycocotools.cocoeval")
    workdir = tmp_path / "run"
    shutil.copytree(grouped_workdir, workdir)
    root = pathlib.Path(config_lib.load_json(workdir / "config.json").data.root)
    runs = {
        "eval.py": _script("eval.py", f"--workdir={workdir}"),
        "export.py": _script(
            "export.py", f"--workdir={workdir}", f"--out={tmp_path / 'x'}"
        ),
        "predict.py": _script(
            "predict.py",
            f"--workdir={workdir}",
            f"--out={tmp_path / 'out'}",
            str(root / "val"),
        ),
    }
    for name, result in runs.items():
        assert result.returncode == 0, (name, result.stderr[-3000:])
    assert (workdir / "eval_val.json").exists()
    assert (tmp_path / "x" / "predict.jax").exists()
    assert (tmp_path / "out" / "predictions.json").exists()
