r"""Evaluates the latest checkpoint of a workdir (or a kept one) on a COCO
subset.

  python eval.py --workdir=workdirs/shapes
  python eval.py --workdir=workdirs/shapes --step=1000   # or --all_steps
  python eval.py --workdir=DIR --config=configs/coco_r50_fpn.py \
      --split='val2017[:500]' --nms=pallas --max_images=100

  python eval.py --workdir=DIR --print_config   # the config it would use

Writes <workdir>/eval_<slug>.json, .png and .detections.json
(eval_<slug>_step<N>.* for a step named; docs/training.md). Multi-host
flags: --helpfull (docs/multi-host.md).
"""

from absl import app, flags

from detector.distributed import peers
from detector.launch import (
    cli,
    config_help,
    data_check,
    flag_types,
    run_config,
    validate,
)
from detector.launch.console import logs
from detector.utils import compile_cache

_WORKDIR = flag_types.define_path(
    "workdir", None, "Workdir of a training run (required)."
)
_CONFIG = cli.define_config(
    "config", None, "Config file (default: <workdir>/config.json)."
)
_NMS = cli.define_nms("NMS backend for both NMS sites.")
_SPLIT = flags.DEFINE_string(
    "split",
    None,
    "Split to evaluate, with optional slicing: "
    "'val2017[:500]', 'validation[:10%]' (default: the config's).",
)
_MAX_IMAGES = flags.DEFINE_integer(
    "max_images", 0, "Evaluate at most this many images."
)
_PRINT_CONFIG = cli.define_print_config()
_STEP = flags.DEFINE_integer(
    "step",
    None,
    "Evaluate the kept checkpoint of this step (default: the newest).",
)
_ALL_STEPS = flags.DEFINE_bool(
    "all_steps", False, "Evaluate every kept checkpoint, oldest first."
)
_MULTIHOST = cli.MultihostFlags()


def main(argv: list[str]) -> None:
    cli.check_no_arguments(argv)
    logs.quiet_libraries()
    # Written to (eval_*.json): a read-only workdir fails before evaluating.
    workdir, config = run_config.load_workdir(
        _WORKDIR, _CONFIG, writes=not _PRINT_CONFIG.value
    )
    with cli.one_line_errors():
        if _NMS.value:
            cli.set_nms_backend(config, _NMS.value)
    if _PRINT_CONFIG.value:
        print(config_help.printed(config), end="", flush=True)
        return
    with cli.one_line_errors():  # before JAX starts: a missing dataset
        split = _SPLIT.value or config.data.eval_split
        data_check.check(config, {"data.eval_split": split})
    cli.start_jax(config, _MULTIHOST)
    compile_cache.enable()  # a rerun loads its programs from disk
    import jax

    from detector.evaluation import curves, eval_lib

    with cli.one_line_errors():
        cli.check_nms_under_guard(config, jax.default_backend(), _NMS.value)
        validate.validate(config)  # before anything is read or written
        steps = eval_lib.chosen_steps(workdir, _STEP.value, _ALL_STEPS.value)
        results = eval_lib.evaluate_checkpoints(
            config,
            workdir,
            split=_SPLIT.value,
            max_images=_MAX_IMAGES.value,
            steps=steps,
        )
        drawn = jax.process_index() == 0 and curves.draw(
            workdir, eval_lib.result_stem(workdir, config.data.eval_split).name
        )
    peers.finished()
    if jax.process_index() == 0:
        lines = [
            eval_lib.result_line(workdir, config, result, steps != [None])
            for result in results
        ]
        if drawn:
            lines[-1] += f"; {curves.note(workdir)}"
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    app.run(
        main,
        flags_parser=lambda a: cli.parse_flags(
            run_config.workdir_config_argv(a)
        ),
    )
