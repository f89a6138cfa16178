"""Path flags: `~` means the home folder in every path flag of every entry
point, as the shell would have made it had it expanded `--out=~/x` (it does
not: the `~` is not at the start of the word). Light: absl only, so
predict.py's runtime can use it."""

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
            f"{path}: {user} names no home folder (no such user, or no "
            "$HOME); write the folder out in full"
        )
    return expanded


class PathParser(flags.ArgumentParser):
    """A string flag holding a path: `~` expanded as the flag is parsed."""

    def parse(self, argument: str) -> str:
        """The path of `argument`, `~` expanded (`expand`)."""
        return expand(argument)

    def flag_type(self) -> str:
        return "path"


def define(
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
