"""A run's config: paths made absolute for config.json (train.py), and a
workdir's config.json read as eval.py's and export.py's config file."""

import os
import pathlib

import ml_collections
from absl import flags

from detector import config as config_lib
from detector.launch import cli, config_history
from detector.utils import files

# Config fields holding a local path (or "": unset).
PATH_FIELDS = (
    "data.root",
    "data.tfds_data_dir",
    "model.backbone_init",
    "model.init_checkpoint",
)
_TRAINED = "give the workdir of a train.py run"
# The folders a training run keeps in its workdir.
RUN_FOLDERS = ("checkpoints",)


def get_config(path: str) -> ml_collections.ConfigDict:
    """config_flags' entry point: the config.json at `path`."""
    return config_lib.load_json(pathlib.Path(path).expanduser())


def check_workdir(workdir: pathlib.Path, *, writes: bool = False) -> None:
    """Raises ValueError unless `workdir` is a folder (and, with `writes`,
    one this process can write into: eval.py finds out before it
    evaluates, not when it writes the result)."""
    where = f"--workdir={workdir}"
    if not workdir.exists():
        raise ValueError(f"{where}: no such folder; {_TRAINED}")
    if not workdir.is_dir():
        raise ValueError(f"{where}: a file, not a folder; {_TRAINED}")
    if writes:
        files.check_writable_folder(workdir, "--workdir")


def check_run_folders(workdir: str | pathlib.Path) -> None:
    """Raises ValueError when a folder a run keeps in `workdir`
    (RUN_FOLDERS) is there as something else: train.py refuses the run
    before it writes anything, not at its first checkpoint."""
    for name in RUN_FOLDERS:
        path = pathlib.Path(workdir) / name
        if path.exists() and not path.is_dir():
            raise ValueError(
                f"--workdir={workdir}: {path} is a file, not the {name} "
                "folder a training run keeps there; move it away or choose "
                "another --workdir"
            )


def check_run_kept(
    workdir: str | pathlib.Path, started: os.stat_result | None = None
) -> None:
    """Raises ValueError when the workdir a run trains into is no longer
    the run's: the config.json it wrote at its start is gone, or (given
    `started`, the workdir's stat when the run began) another folder now
    stands at its path; it was deleted, moved or replaced while the run
    trained, and what the run wrote there with it."""
    path = pathlib.Path(workdir) / config_history.LATEST
    if not path.is_file():
        what = f"{path} is gone"
    elif started is not None and not _same_folder(workdir, started):
        what = f"{workdir} is another folder than the one the run began in"
    else:
        return
    raise ValueError(
        f"--workdir={workdir}: {what}: the workdir was deleted, moved or "
        "replaced while the run trained, and its checkpoints and metrics "
        "with it; train again into a workdir that stays"
    )


def _same_folder(folder: str | pathlib.Path, started: os.stat_result) -> bool:
    """Whether `folder` is still the folder whose stat was `started`."""
    try:
        now = os.stat(folder)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (started.st_dev, started.st_ino)


def load_workdir(
    workdir_flag: flags.FlagHolder,
    config_flag: flags.FlagHolder,
    *,
    writes: bool = False,
) -> tuple[pathlib.Path, ml_collections.ConfigDict]:
    """The workdir `workdir_flag` names (`check_workdir`) and its config
    (`load`); a failure is one line."""
    if workdir_flag.value is None:
        cli.fail(
            f"--{workdir_flag.name} is required: the workdir of a train.py "
            "run, e.g. --workdir=workdirs/shapes"
        )
    workdir = pathlib.Path(workdir_flag.value)
    with cli.one_line_errors():
        check_workdir(workdir, writes=writes)
    return workdir, load(config_flag, workdir)


def load(
    flag: flags.FlagHolder, workdir: str | pathlib.Path
) -> ml_collections.ConfigDict:
    """The config of a config flag when given (`workdir_config_argv` points
    it at the workdir's config.json), else that config.json; a failure is
    one line."""
    with cli.one_line_errors():
        if flag.value is not None:
            return cli.config_value(flag)
        return config_lib.load_json(
            pathlib.Path(workdir) / config_history.LATEST,
            written_by_train=True,
        )


def absolute_paths(
    config: ml_collections.ConfigDict, cwd: str | os.PathLike | None = None
) -> list[str]:
    """Makes the PATH_FIELDS of `config` absolute (against `cwd`, default
    the current folder; `~` expanded); returns the fields it changed.

    Empty fields and URLs (`gs://...`) are left as they are.
    """
    base = pathlib.Path.cwd() if cwd is None else pathlib.Path(cwd)
    changed = []
    for field in PATH_FIELDS:
        section, name = field.split(".")
        value = config[section][name]
        if not value or "://" in value:
            continue
        path = pathlib.Path(value).expanduser()
        absolute = os.path.normpath(base / path)  # base / absolute = absolute
        if absolute != value:
            config[section][name] = absolute
            changed.append(field)
    return changed


def _flag_value(argv: list[str], name: str) -> tuple[int, str] | None:
    """(index, value) of the last `--name=v` / `--name v` in `argv`
    (before a `--` that ends the flags), or None."""
    found = None
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "--":
            break
        for prefix in (f"--{name}", f"-{name}"):
            if arg.startswith(prefix + "="):
                found = (i, arg[len(prefix) + 1 :])
            elif arg == prefix and i + 1 < len(argv):
                found = (i, argv[i + 1])
    return found


def json_config_spec(path: str) -> str:
    """The `--config` value that loads config.json `path` through this
    file."""
    return f"{pathlib.Path(__file__).resolve()}:{path}"


def json_config_argv(argv: list[str]) -> list[str]:
    """`argv` with a `--config=X.json` (config.json, --print_config's
    output) read through this file; any other `argv` unchanged."""
    argv = list(argv)
    config = _flag_value(argv, "config")
    if config is not None and config[1].endswith(".json"):
        index, value = config
        if argv[index].startswith("-") and "=" in argv[index]:
            argv[index] = f"--config={json_config_spec(value)}"
        else:
            argv[index + 1] = json_config_spec(value)
    return argv


def config_name(spec: str) -> str:
    """'<file stem>[_<variant>]' of a --config value; a JSON config's
    stem alone."""
    file, _, variant = spec.partition(":")
    if variant.endswith(".json"):  # json_config_spec's
        file, variant = variant, ""
    return "_".join(filter(None, [pathlib.Path(file).stem, variant]))


def workdir_config_argv(argv: list[str]) -> list[str]:
    """`argv` of eval.py / export.py with the config a config file flag.

    `--config=X.json` becomes `--config=<this file>:X.json`; without any
    `--config`, `--config=<this file>:<workdir>/config.json` is put first
    (overrides must follow it). Without `--workdir` `argv` is unchanged
    (the flag parser reports it), and so it is without overrides where the
    workdir has no config.json (eval.py names the missing file).
    """
    argv = list(argv)
    if _flag_value(argv, "config") is not None:
        return json_config_argv(argv)
    workdir = _flag_value(argv, "workdir")
    if workdir is None:
        return argv
    path = pathlib.Path(workdir[1]).expanduser() / config_history.LATEST
    overrides = any(arg.startswith("--config.") for arg in argv[1:])
    if not (overrides or path.exists()):
        return argv  # eval.py reports the missing config.json itself
    return [argv[0], f"--config={json_config_spec(str(path))}", *argv[1:]]
