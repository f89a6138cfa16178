"""The fields in which two configs differ, as JSON dicts (config.json)."""

import json


def _flat(tree: object, prefix: str = "") -> dict[str, object]:
    """{'train.batch_size': 8, ...} of nested dicts (JSON values)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def changes(stored: dict, current: dict) -> list[str]:
    """'field old -> new' for every field that differs (sorted by field);
    a field only one side has reads '(absent)' on the other."""
    old, new = _flat(stored), _flat(current)
    absent = "(absent)"
    return [
        f"{field} {json.dumps(old.get(field, absent))} -> "
        f"{json.dumps(new.get(field, absent))}"
        for field in sorted(set(old) | set(new))
        if old.get(field, absent) != new.get(field, absent)
    ]
