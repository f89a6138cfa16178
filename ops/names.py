"""The one check of a name against the names a registry knows, worded as
the config key's error line."""

from collections.abc import Collection


def check_known(name: str, key: str, known: Collection[str], what: str) -> None:
    """Raises `config.<key>=<name>: unknown <what>; known: <known>` unless
    `name` is one of `known`."""
    if name not in known:
        raise ValueError(
            f"config.{key}={name!r}: unknown {what}; known: {', '.join(known)}"
        )
