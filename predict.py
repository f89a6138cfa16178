"""Predicts on image files with a trained model (the default run's knows
three synthetic shapes only: circle, rectangle, triangle), in-process or
exported.

  python predict.py --workdir=workdirs/shapes photos/ more/a.jpg
  python predict.py --exported=workdirs/shapes/export photos/
  python predict.py --exported=workdirs/shapes/export --score_threshold=0.7 \
      --classes=circle,triangle photos/

Real objects (COCO's 80 categories) from torchvision's weights
(docs/torchvision-weights.md):

  python export.py --workdir=runs/torchvision_coco \
      --config=configs/coco_r50_fpn.py:torchvision --config.data.root=data/coco
  python predict.py --exported=runs/torchvision_coco/export photos/

Writes <out>/predictions.json and one overlay PNG per image; a rerun of the
same command continues (docs/export-and-predict.md).
"""

import pathlib
import sys

from absl import app, flags

from detector.imaging import images
from detector.launch import flag_types
from detector.launch.console import usage
from detector.utils import text

_WORKDIR = flag_types.define_path(
    "workdir", None, "Workdir of a training run (runs the model in-process)."
)
_EXPORTED = flag_types.define_path(
    "exported", None, "Folder written by export.py (runs the artifact)."
)
_OUT = flag_types.define_path(
    "out", "predictions", "Folder for predictions.json and the overlays."
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Images per batch.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite",
    False,
    "Predict again the images already in <out>/predictions.jsonl (by "
    "default a rerun continues where an interrupted one stopped).",
)
_MAX_PIXELS = flags.DEFINE_integer(
    "max_pixels",
    images.DEFAULT_MAX_PIXELS,
    "Skip images of more pixels than this, in one line each (0: no limit; "
    "it replaces Pillow's decompression-bomb guard).",
    lower_bound=0,
)
_SCORE_THRESHOLD = flag_types.define_float(
    "score_threshold",
    None,
    "Keep only detections of this score and up, in predictions.json and the "
    "overlays (default: all in predictions.json, 0.5 and up drawn).",
    lower_bound=0.0,
    upper_bound=1.0,
)
_CLASSES = flags.DEFINE_string(
    "classes",
    None,
    "Keep only these categories, names or ids, comma-separated "
    "(--classes=person,dog), in predictions.json and the overlays.",
)
_QUIET = flags.DEFINE_bool(
    "quiet",
    False,
    "Print no progress (by default a bar on a terminal, a line per "
    "20 images with an ETA when piped); errors, skipped: lines and the last "
    "line still print.",
)
_NMS = flags.DEFINE_string(
    "nms",
    None,
    "With --workdir: NMS backend for both NMS sites, a name of "
    "ops.nms.BACKENDS (default: the config's).",
)


def _fail(message: str) -> None:
    sys.exit(f"error: {text.printable(message)}")


def _in_process_predictor(workdir: pathlib.Path):
    """The model of `workdir`, restored and jitted here (imports it)."""
    from detector import config as config_lib
    from detector.export import in_process
    from detector.launch import cli, validate
    from detector.launch.console import logs

    logs.quiet_libraries()

    with cli.one_line_errors():
        config = config_lib.load_json(
            workdir / "config.json", written_by_train=True
        )
        if _NMS.value:
            cli.set_nms_backend(config, _NMS.value)
        validate.validate(config)
        return in_process.predictor(config, workdir)


def _exported_predictor(directory: pathlib.Path):
    """The artifact of `directory`, loaded by the light runtime."""
    from detector.launch.console import logs
    from detector.predict import artifact, runner

    logs.quiet_libraries()
    if _NMS.value:
        _fail("--nms: the NMS backend of an artifact is fixed at export")
    try:
        return runner.artifact_predictor(artifact.load(directory))
    except artifact.ArtifactError as e:
        _fail(str(e))


def _check_files(args: list[str], out: pathlib.Path) -> None:
    """The inputs exist, --out holds none of them and no file predict.py
    did not write, before any loading."""
    from detector.predict import output_files, runner

    try:
        output_files.check_out(out, runner.list_images(args))
        output_files.check_own_files(out)
    except ValueError as e:
        _fail(str(e))


def _predict(args: list[str], out: pathlib.Path) -> None:
    """Loads the predictor and predicts `args` into `out` (locked)."""
    from detector.utils import compile_cache

    compile_cache.enable()  # a rerun loads its programs from disk
    if _WORKDIR.value is not None:
        predictor = _in_process_predictor(
            pathlib.Path(_WORKDIR.value).expanduser()
        )
    else:
        predictor = _exported_predictor(pathlib.Path(_EXPORTED.value))
    from detector.predict import artifact, fixed_batch, runner

    # One program per canvas: a last, smaller batch is padded.
    predictor = fixed_batch.padded(
        predictor, max(_BATCH_SIZE.value, 1), quiet=_QUIET.value
    )
    try:
        filters = runner.Filters(
            _SCORE_THRESHOLD.value,
            None
            if _CLASSES.value is None
            else runner.class_filter(_CLASSES.value, predictor.categories),
        )
        summary = runner.predict_files(
            predictor,
            args,
            out,
            batch_size=_BATCH_SIZE.value,
            overwrite=_OVERWRITE.value,
            max_pixels=_MAX_PIXELS.value,
            quiet=_QUIET.value,
            filters=filters,
        )
    except OSError as e:
        _fail(f"{e.filename}: {e.strerror or e}")
    except (ValueError, artifact.ArtifactError) as e:
        _fail(str(e))
    print(text.printable(runner.summary_line(summary, out)))


def main(argv: list[str]) -> None:
    if (_WORKDIR.value is None) == (_EXPORTED.value is None):
        _fail("name exactly one of --workdir=W or --exported=W/export")
    out = pathlib.Path(_OUT.value)
    _check_files(argv[1:], out)
    from detector.predict import output_files, runner, stopping

    try:
        # The lock before loading: a second run fails fast.
        with stopping.signals_raise(), output_files.locked(out):
            _predict(argv[1:], out)
    except output_files.OutFolderError as e:
        _fail(str(e))
    except runner.Interrupted as e:
        print(text.printable(e), file=sys.stderr)
        sys.exit(e.code)
    except stopping.STOPS as e:
        print(
            "interrupted while loading the model; nothing new was predicted",
            file=sys.stderr,
        )
        sys.exit(stopping.exit_code(e))


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's parser with one error line instead of usage text."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _fail(str(e).splitlines()[-1] if str(e) else type(e).__name__)


if __name__ == "__main__":
    app.run(main, flags_parser=lambda a: usage.parse(a, _parse_flags))
