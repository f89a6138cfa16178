"""Flag types of the entry points: paths, whose `~` is the home folder in
every path flag (the shell leaves `--out=~/x` as it is: the `~` is not at
the start of the word), and bounded numbers that refuse NaN (which
compares false with every bound). Light: absl only, so predict.py's
runtime can use it."""

import math
import os

from absl import flags


def expand(path: str) -> str:
    """`path` with a leading `~` or `~user` made the home folder.

    Raises:
      ValueError: `~user` names no user (the path would be a folder
        literally named `~user`).
    """
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        user = expanded.split(os.sep, 1)[0]
        raise ValueError(
            f"{user} names no home folder (no such user, or no $HOME); "
            "write the folder out in full"
        )
    return expanded


class PathParser(flags.ArgumentParser):
    """A string flag holding a path: `~` expanded as the flag is parsed."""

    def parse(self, argument: str) -> str:
        """The path of `argument`, `~` expanded (`expand`)."""
        return expand(argument)

    def flag_type(self) -> str:
        return "path"


class FiniteFloatParser(flags.FloatParser):
    """absl's bounded float parser, refusing NaN and infinities (NaN passes
    every `lower_bound`/`upper_bound` test: each comparison is false)."""

    def convert(self, argument) -> float:
        value = super().convert(argument)
        if not math.isfinite(value):
            raise ValueError(f"{argument} is not a finite number")
        return value


def define_path(
    name: str, default: str | None, help_text: str, **kwargs
) -> flags.FlagHolder:
    """A path flag: flags.DEFINE_string whose value has `~` expanded (a
    value the shell left as `--name=~/x` included)."""
    return flags.DEFINE(
        PathParser(),
        name,
        default,
        help_text,
        serializer=flags.ArgumentSerializer(),
        **kwargs,
    )


def define_float(
    name: str,
    default: float | None,
    help_text: str,
    *,
    lower_bound: float | None = None,
    upper_bound: float | None = None,
    **kwargs,
) -> flags.FlagHolder:
    """flags.DEFINE_float whose value must be a finite number in the
    bounds (`--name=nan` is one error line)."""
    return flags.DEFINE(
        FiniteFloatParser(lower_bound, upper_bound),
        name,
        default,
        help_text,
        serializer=flags.ArgumentSerializer(),
        **kwargs,
    )
