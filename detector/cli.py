"""Command-line plumbing shared by train.py and eval.py: one-line errors.

A bad flag, config file, config variant or `--config.a.b=v` override ends
the program with a single `error: ...` line and exit code 1, not a
traceback from inside the flag or config libraries.
"""

import re
import sys

from absl import flags
from ml_collections import config_flags


def fail(message: str) -> None:
    """Exits with `error: <message>` on stderr and status 1."""
    sys.exit(f"error: {message}")


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if
             line.strip()]
    return lines[-1] if lines else type(error).__name__


def define_config(name: str, default: str | None, help_text: str):
    """config_flags.DEFINE_config_file, failing cleanly on a bad override.

    config_flags applies `--config.a.b=v` overrides while the flag is being
    defined, so an unknown key surfaces here.
    """
    try:
        return config_flags.DEFINE_config_file(name, default, help_text,
                                               lock_config=True)
    except (AttributeError, KeyError) as e:
        key = re.search(r"\w+", str(e))
        key = key.group(0) if key else "?"
        arg = next((a for a in sys.argv[1:] if a.startswith(f"--{name}.")
                    and key in a.split("=")[0]), f"--{name}")
        hint = re.search(r'Did you mean "(\w+)"', str(e))
        fail(f"{arg}: {key!r} is not a config field" +
             (f"; did you mean {hint.group(1)!r}?" if hint else ""))


def parse_flags(argv: list[str]) -> list[str]:
    """absl flags parser for app.run: one line per parse error."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(_last_line(e))


def config_value(flag):
    """The loaded config of a config flag; a load failure is one line."""
    try:
        config = flag.value
        config.keys()  # a config that failed to load raises on first use
        return config
    except (OSError, ValueError, AttributeError, KeyError) as e:
        fail(f"--{flag.name}: {_last_line(e)}")
