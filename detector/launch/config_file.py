"""A --config file loaded: `file.py[:variant]`, whose get_config() returns
an ml_collections.ConfigDict; anything a file does wrong is one line
naming the file and, where Python says, the line (docs/bad-input.md)."""

import importlib.util
import os
import pathlib
import sys
import traceback

import ml_collections
from absl import flags
from ml_collections import config_flags

from detector import config as config_lib
from detector.config import structure
from detector.launch import flag_types
from detector.utils import files

# The project's config files, listed when a --config file is not found.
PROJECT_CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


class ConfigFileError(flags.Error):
    """A config file did not load; the text is the one line to print."""


def _article(value: object) -> str:
    """'None', 'a dict', 'an int': what get_config() returned."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _where(error: BaseException, path: str) -> str:
    """'<path>, line N' for the innermost line of `path` that `error`
    passed through (a SyntaxError's own line), else `path`."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f"{path}, line {error.lineno}"
    target = os.path.realpath(path)
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(error.__traceback__)
        if os.path.realpath(frame.filename) == target
    ]
    return f"{path}, line {lines[-1]}" if lines else path


def _error_line(
    error: BaseException, path: str, flag: str, variant: str = ""
) -> str:
    """The one line of an error raised while `path` (given `variant`: a
    JSON config's path, to json_config_spec's loader) loaded or ran."""
    text = " ".join(str(error).split())
    if isinstance(error, SyntaxError):
        text = error.msg
    names = [os.path.basename(p) for p in (path, variant) if p]
    if isinstance(error, ValueError) and any(n in text for n in names):
        return text  # the file's own message, which names it
    return f"{flag}: {_where(error, path)}: {type(error).__name__}: {text}"


def _exit_line(error: SystemExit, path: str, flag: str) -> str:
    """The one line of a config file that called sys.exit()."""
    return (
        f"{flag}: {_where(error, path)}: the config file called "
        f"sys.exit({error.code!r}) instead of returning its config; a "
        "config file's get_config() must return an ml_collections.ConfigDict"
    )


def _project_configs() -> str:
    """'; the project's configs: configs/a.py, ...' (paths as the current
    folder reaches them), or '' without any."""
    folder = PROJECT_CONFIGS
    if not folder.is_dir():
        return ""
    names = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    if not names:
        return ""
    cwd = pathlib.Path.cwd()
    shown = [
        str(p.relative_to(cwd)) if p.is_relative_to(cwd) else str(p)
        for p in names
    ]
    return f"; the project's configs: {', '.join(shown)}"


def _check_file(file: str, flag: str) -> None:
    """Raises ConfigFileError unless `file` is a regular file."""
    if os.path.isfile(file):
        return
    if not os.path.exists(file):
        reason = "No such file or directory" + _project_configs()
    elif os.path.isdir(file):
        reason = "Is a directory"
    else:
        reason = f"not a regular file ({files.kind_of(file)})"
    raise ConfigFileError(f"{flag}: {file}: {reason}")


def _load_module(name: str, path: str):
    """The module of config file `path`, run once."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses need it
    spec.loader.exec_module(module)
    return module


class ConfigFileParser(flags.ArgumentParser):
    """A config file flag's parser (config_flags' own, which passes a
    file's errors on whole), failing in one line: ConfigFileError."""

    def __init__(self, name: str, lock_config: bool = True):
        self.name = name
        self._lock_config = lock_config

    def flag_type(self) -> str:
        return "config object"

    def parse(self, path: str) -> ml_collections.ConfigDict:
        """The locked config of `path` ('file.py' or 'file.py:variant')."""
        file, *variant = path.split(":", 1)
        flag = f"--{self.name}"
        try:
            file = flag_types.expand(file)
        except ValueError as e:
            raise ConfigFileError(f"{flag}: {file}: {e}") from None
        _check_file(file, flag)
        try:
            module = _load_module(f"{self.name}_config", file)
            if not callable(getattr(module, "get_config", None)):
                raise ConfigFileError(
                    f"{flag}: {file}: defines no get_config()"
                )
            config = module.get_config(*variant)
        except ConfigFileError:
            raise
        except OSError as e:
            reason = e.strerror or str(e)
            named = f"{e.filename}: {reason}" if e.filename else reason
            raise ConfigFileError(f"{flag}: {named}") from None
        except SystemExit as e:
            raise ConfigFileError(_exit_line(e, file, flag)) from None
        except Exception as e:  # noqa: BLE001 (any error of the file's code)
            raise ConfigFileError(
                _error_line(e, file, flag, *variant)
            ) from None
        if not isinstance(config, ml_collections.ConfigDict):
            raise ConfigFileError(
                f"{flag}: {file}: get_config() returned {_article(config)}, "
                "not an ml_collections.ConfigDict"
            )
        try:
            structure.check(
                config,
                config_lib.base_config(),
                f"{flag}: {file}: get_config()'s config",
            )
        except ValueError as e:
            raise ConfigFileError(str(e)) from None
        if self._lock_config:
            config.lock()
        return config


def define(name: str, default: str | None, help_text: str) -> flags.FlagHolder:
    """A config file flag (config_flags.DEFINE_config_file, locked) whose
    values given on the command line load through ConfigFileParser."""
    holder = config_flags.DEFINE_config_file(
        name, default, help_text, lock_config=True
    )
    flags.FLAGS[name].parser = ConfigFileParser(name)
    return holder
