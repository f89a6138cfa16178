"""Checks shared by the config sections: each raises one ValueError line
naming the key, its value and the reason."""

import ml_collections


def check(condition: bool, key: str, value, reason: str) -> None:
    """Raises `config.<key>=<value>: <reason>` unless `condition`."""
    if not condition:
        raise ValueError(f"config.{key}={value!r}: {reason}")


def get(config: ml_collections.ConfigDict, key: str):
    """The value at dotted `key` ('train.batch_size')."""
    for part in key.split("."):
        config = config[part]
    return config


def check_image_size(size, key: str = "data.image_size") -> None:
    """Raises ValueError unless `size` (config `key`) is (height, width),
    both positive."""
    if not isinstance(size, tuple | list) or len(size) != 2:
        raise ValueError(
            f"config.{key}={size!r}: must be (height, width), two integers"
        )
    if not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size
    ):
        raise ValueError(
            f"config.{key}={tuple(size)!r}: height and "
            "width must be positive integers"
        )
