"""The resize rule's names (config data.resize), checked without
TensorFlow."""

_RULES = ("letterbox", "shortest_edge")


def check_rule(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown rule."""
    if name not in _RULES:
        raise ValueError(
            f"config.{key}={name!r}: must be one of {', '.join(_RULES)}"
        )
