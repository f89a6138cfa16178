r"""Exports a workdir's predict function as a jax.export artifact.

  python export.py --workdir=workdirs/shapes
  python export.py --workdir=W --out=W/export --platforms=cpu,cuda,tpu \
      --nms=pallas

Run it with `python predict.py --exported=<out> IMAGES...`
(docs/export-and-predict.md).
"""

import pathlib

from absl import app, flags

from detector.launch import cli, flag_types, run_config, validate
from detector.launch.console import logs
from detector.utils import compile_cache

_WORKDIR = flag_types.define_path(
    "workdir", None, "Workdir of a training run (required)."
)
_OUT = flag_types.define_path(
    "out", None, "Folder to write the artifact to (default: <workdir>/export)."
)
_CONFIG = cli.define_config(
    "config", None, "Config file (default: <workdir>/config.json)."
)
_PLATFORMS = flags.DEFINE_list(
    "platforms",
    "cpu,cuda,tpu",
    "Platforms to lower for, in one artifact: any of cpu, cuda, tpu.",
)
_NMS = cli.define_nms(
    "NMS backend for both NMS sites (default: the config's); cpu cannot "
    "be exported."
)


def main(argv: list[str]) -> None:
    cli.check_no_arguments(argv)
    logs.quiet_libraries()
    workdir, config = run_config.load_workdir(_WORKDIR, _CONFIG)
    compile_cache.enable()  # a rerun loads its programs from disk
    with cli.one_line_errors():
        if _NMS.value:
            cli.set_nms_backend(config, _NMS.value)
        validate.validate(config)  # before anything is read or written
        from detector.export import exporter

        out = pathlib.Path(_OUT.value or workdir / "export")
        meta = exporter.export_workdir(
            config,
            workdir,
            out,
            platforms=tuple(_PLATFORMS.value),
            nms=_NMS.value,
        )
    print(exporter.summary(meta, out))


if __name__ == "__main__":
    app.run(
        main,
        flags_parser=lambda a: cli.parse_flags(
            run_config.workdir_config_argv(a)
        ),
    )
