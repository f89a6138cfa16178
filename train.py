"""Trains a Mask R-CNN config, then evaluates it on its eval split.

  python train.py                      # configs/shapes.py into workdirs/shapes
  python train.py --config=configs/coco_r50_fpn.py --workdir=DIR --nms=pallas
  python train.py --config=configs/shapes.py:runlocal    # tiny smoke run
  python train.py --config.train.num_steps=500           # override any field
  python train.py --print_config > my.json    # every field; --config=my.json

Multi-host flags: --helpfull (docs/multi-host.md).

A run resumes from its workdir's latest checkpoint (docs/training.md).
"""

import contextlib
import pathlib
import sys

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from detector.distributed import peers, preemption, run_lock
from detector.launch import (
    cli,
    config_help,
    data_check,
    flag_types,
    run_config,
)
from detector.launch.console import logs, next_steps
from detector.utils import compile_cache, files
from ops import host_audit

_HERE = pathlib.Path(__file__).resolve().parent
_CONFIG = cli.define_config(
    "config",
    str(_HERE / "configs" / "shapes.py"),
    "Config file, optionally with a variant: configs/shapes.py:runlocal.",
)
_WORKDIR = flag_types.define_path(
    "workdir", None, "Output folder (default: workdirs/<config name>)."
)
_NMS = cli.define_nms("NMS backend for both NMS sites (default: the config's).")
_STRICT = flags.DEFINE_bool(
    "strict_device",
    False,
    "Fail before step 1 if the compiled train step or the compiled predict "
    "(run by the evaluations) has any host round-trip.",
)
_EVALUATE_FINISHED = flags.DEFINE_bool(
    "evaluate_finished",
    False,
    "On a workdir already trained to num_steps: evaluate it again (default: "
    "report it complete; eval.py evaluates any checkpoint).",
)
_PRINT_CONFIG = cli.define_print_config()
_MULTIHOST = cli.MultihostFlags()


def default_workdir() -> str:
    """workdirs/<config file stem>[_<variant>]."""
    spec = config_flags.get_config_filename(flags.FLAGS["config"])
    return str(pathlib.Path("workdirs") / run_config.config_name(spec))


def main(argv: list[str]) -> None:
    cli.check_no_arguments(argv)
    logs.quiet_libraries()
    config = cli.config_value(_CONFIG)
    with cli.one_line_errors():
        if _NMS.value:
            cli.set_nms_backend(config, _NMS.value)
        with config.unlocked():
            run_config.absolute_paths(config)  # config.json: from anywhere
        if _PRINT_CONFIG.value:
            print(config_help.printed(config), end="", flush=True)
            return
        data_check.check(config)  # before JAX starts: a missing dataset
    logging.info(  # else the console is silent through these seconds
        "Starting JAX and importing TensorFlow and the model (about 15 s "
        "on a 2-core CPU)%s",
        compile_cache.kept_note(),
    )
    cli.start_jax(config, _MULTIHOST)
    compile_cache.enable()  # a rerun loads its programs from disk
    # After jax.distributed.initialize, whose own SIGTERM handler this
    # replaces: from here on a signal exits at once, from step 1 it saves.
    stop = preemption.Watch.install()
    workdir = _WORKDIR.value or default_workdir()
    from detector.state import checkpoint  # orbax: after JAX starts

    try:
        with cli.one_line_errors(
            FloatingPointError,
            host_audit.HostRoundTripError,
            at_once=(checkpoint.CheckpointSaveError,),
        ):
            cli.check_nms_under_guard(config, jax.default_backend(), _NMS.value)
            files.check_writable_folder(workdir, "--workdir")
            run_config.check_run_folders(workdir)
            # Before the heavy imports and the dataset scan: a busy
            # workdir is refused in seconds; a failed start leaves none.
            with run_lock.held(workdir, create=True):
                results = _train(config, workdir, stop)
                if jax.process_index() == 0:  # the process that wrote it
                    run_config.check_run_kept(workdir)
    except preemption.Preempted as e:
        peers.finished()  # an agreed stop: no process is lost
        with contextlib.suppress(OSError):  # a closed terminal's stderr
            print(e, file=sys.stderr, flush=True)
        sys.exit(preemption.exit_code(e.signum))
    peers.finished()
    if jax.process_index() == 0:
        from detector.evaluation import curves

        line = next_steps.final_line(workdir, results, config.train.num_steps)
        if (pathlib.Path(workdir) / curves.FILE_NAME).exists():
            line += f"; {curves.note(workdir)}"
        print(line, flush=True)


def _train(
    config: ml_collections.ConfigDict,
    workdir: str,
    stop: preemption.Watch,
) -> dict:
    """Validates `config`, then trains and evaluates it into `workdir`."""
    from detector.engine import train_lib
    from detector.launch import config_history, tpu_fit, validate

    validate.validate(config)  # before anything is built or written
    tpu_fit.check(config)  # a batch over a TPU chip's HBM, before compiling
    for line in validate.warnings(config):
        logging.warning("%s", line)
    return train_lib.train_and_evaluate(
        config,
        workdir,
        hooks=train_lib.LaunchHooks(
            check_resume=config_history.check_resume,
            save_config=config_history.save,
            check_kept=run_config.check_run_kept,
            complete_key=next_steps.COMPLETE,
        ),
        strict_device=_STRICT.value,
        stop=stop,
        evaluate_finished=_EVALUATE_FINISHED.value,
    )


if __name__ == "__main__":
    app.run(
        main,
        flags_parser=lambda a: cli.parse_flags(run_config.json_config_argv(a)),
    )
