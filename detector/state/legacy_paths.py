"""Checkpoints written before the RPN and the box and mask branches held
their heads: their head paths (`box_head/...`) and today's
(`box_branch/head/...`), converted both ways on restore.
"""

from typing import Any

# The old top-level name of each head -> (its part, the part's attribute).
RENAMED = {
    "rpn_head": ("rpn", "head"),
    "box_head": ("box_branch", "head"),
    "mask_head": ("mask_branch", "head"),
}


def is_legacy(names: Any) -> bool:
    """Whether flat names ('params/box_head/fc1/kernel') hold an old head."""
    return any(part in RENAMED for name in names for part in name.split("/"))


def to_current(tree: Any) -> Any:
    """Nested dicts with every old head key moved under its part."""
    if not isinstance(tree, dict):
        return tree
    out = {}
    for key, value in tree.items():
        if key in RENAMED:
            part, attribute = RENAMED[key]
            out.setdefault(part, {})[attribute] = to_current(value)
        else:
            out[key] = to_current(value)
    return out


def to_legacy(tree: Any) -> Any:
    """Inverse of `to_current`: each part's head back at its old key."""
    if not isinstance(tree, dict):
        return tree
    old_of = {part: key for key, (part, _) in RENAMED.items()}
    out = {}
    for key, value in tree.items():
        attribute = RENAMED.get(old_of.get(key), (None, None))[1]
        if isinstance(value, dict) and set(value) == {attribute}:
            out[old_of[key]] = to_legacy(value[attribute])
        else:
            out[key] = to_legacy(value)
    return out


def current_name(name: str) -> str:
    """The flat name of today's model for a flat name of either layout."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        if part in RENAMED:
            parts[i : i + 1] = RENAMED[part]
            break
    return "/".join(parts)
