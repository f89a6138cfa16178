"""Predicts on image files with a trained model, in-process or exported.

  python predict.py --workdir=workdirs/shapes photos/ more/a.jpg
  python predict.py --exported=workdirs/shapes/export photos/

Reads JPEG/PNG files of any size and mode (grayscale, RGBA, 16-bit,
EXIF-rotated), resizes them in float as eval does (the config's
data.resize rule, no rounding to uint8), predicts --batch_size at a
time and writes <out>/predictions.json (COCO results keyed by file name:
bbox [x, y, w, h] in original pixels, score, category_id, segmentation RLE)
and one overlay PNG per image. A file that cannot be read is skipped with
one line. --workdir restores the newest checkpoint (with the workdir's
config.json) and runs the model here; --exported runs an artifact written
by export.py and imports only numpy, PIL and jax (detector/predict/ and
detector/imaging/): not the model, the config, the training code,
TensorFlow, Flax or orbax.
"""

import pathlib
import sys

from absl import app, flags

from detector.launch import usage

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Workdir of a training run (runs the model in-process)."
)
_EXPORTED = flags.DEFINE_string(
    "exported", None, "Folder written by export.py (runs the artifact)."
)
_OUT = flags.DEFINE_string(
    "out", "predictions", "Folder for predictions.json and the overlays."
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Images per batch.")
_NMS = flags.DEFINE_enum(
    "nms",
    None,
    ("auto", "cpu", "while_loop", "pallas"),
    "With --workdir: NMS backend for both NMS sites (default: the config's).",
)


def _fail(message: str) -> None:
    sys.exit(f"error: {message}")


def _in_process_predictor(workdir: pathlib.Path):
    """The model of `workdir`, restored and jitted here (imports it)."""
    from detector import config as config_lib
    from detector.export import in_process
    from detector.launch import cli, logs

    logs.quiet_libraries()

    with cli.one_line_errors():
        config = config_lib.load_json(workdir / "config.json")
        with config.unlocked():
            if _NMS.value:
                config_lib.set_nms_backend(config, _NMS.value)
        return in_process.predictor(config, workdir)


def _exported_predictor(directory: pathlib.Path):
    """The artifact of `directory`, loaded by the light runtime."""
    from detector.launch import logs
    from detector.predict import artifact, runner

    logs.quiet_libraries()
    if _NMS.value:
        _fail("--nms: the NMS backend of an artifact is fixed at export")
    try:
        return runner.artifact_predictor(artifact.load(directory))
    except artifact.ArtifactError as e:
        _fail(str(e))


def _check_files(args: list[str], out: pathlib.Path) -> None:
    """The inputs exist and --out holds none of them, before any loading."""
    from detector.predict import output_files, runner

    try:
        output_files.check_out(out, runner.list_images(args))
    except ValueError as e:
        _fail(str(e))


def main(argv: list[str]) -> None:
    if (_WORKDIR.value is None) == (_EXPORTED.value is None):
        _fail("name exactly one of --workdir=W or --exported=W/export")
    _check_files(argv[1:], pathlib.Path(_OUT.value))
    if _WORKDIR.value is not None:
        predictor = _in_process_predictor(
            pathlib.Path(_WORKDIR.value).expanduser()
        )
    else:
        predictor = _exported_predictor(pathlib.Path(_EXPORTED.value))
    from detector.predict import artifact, runner

    try:
        summary = runner.predict_files(
            predictor,
            argv[1:],
            pathlib.Path(_OUT.value),
            batch_size=_BATCH_SIZE.value,
        )
    except OSError as e:
        _fail(f"{e.filename}: {e.strerror or e}")
    except (ValueError, artifact.ArtifactError) as e:
        _fail(str(e))
    print(
        f"{summary['images']} images predicted"
        + (f", {summary['skipped']} skipped" if summary["skipped"] else "")
        + f"; wrote {pathlib.Path(_OUT.value) / runner.PREDICTIONS_FILE}"
    )


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's parser with one error line instead of usage text."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _fail(str(e).splitlines()[-1] if str(e) else type(e).__name__)


if __name__ == "__main__":
    app.run(main, flags_parser=lambda a: usage.parse(a, _parse_flags))
