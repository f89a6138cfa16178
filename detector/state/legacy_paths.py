"""Checkpoints of the model's older layouts: their head paths converted
both ways on restore, to and from today's (`roi_heads/box_head/...`).

A checkpoint holds model trees at any depth (params, optimizer slots);
a path is renamed where an old head's names start, once per path.
"""

from typing import Any

Path = tuple[str, ...]

# layout -> {old path of a head: today's path}.
LAYOUTS: dict[str, dict[Path, Path]] = {
    # Each head at the top of the model.
    "top-level heads (box_head/...)": {
        ("rpn_head",): ("rpn", "head"),
        ("box_head",): ("roi_heads", "box_head"),
        ("mask_head",): ("roi_heads", "mask_head"),
    },
    # The box and mask heads inside box and mask branches.
    "branches (box_branch/head/...)": {
        ("box_branch", "head"): ("roi_heads", "box_head"),
        ("mask_branch", "head"): ("roi_heads", "mask_head"),
    },
}
CURRENT = "roi_heads/box_head/..."


def _rename(path: Path, renames: dict[Path, Path]) -> Path:
    """`path` with the first of `renames`' keys it holds replaced; a key
    right under roi_heads is today's name, not an old one."""
    for i in range(len(path)):
        if i and path[i - 1] == "roi_heads":
            continue
        for old, new in renames.items():
            if path[i : i + len(old)] == old:
                return path[:i] + new + path[i + len(old) :]
    return path


def _inverse(layout: str) -> dict[Path, Path]:
    return {new: old for old, new in LAYOUTS[layout].items()}


def layout_of(names: Any) -> str | None:
    """The older layout that flat names ('params/box_head/fc1/kernel')
    were written in; None for today's."""
    for layout, renames in LAYOUTS.items():
        for name in names:
            path = tuple(name.split("/"))
            if _rename(path, renames) != path:
                return layout
    return None


def _flat(tree: Any, prefix: Path = ()) -> list[tuple[Path, Any]]:
    """(path, leaf) of nested dicts; an empty dict is a leaf."""
    if not isinstance(tree, dict) or not tree:
        return [(prefix, tree)]
    return [
        item
        for key, value in tree.items()
        for item in _flat(value, prefix + (key,))
    ]


def _convert(tree: Any, renames: dict[Path, Path]) -> Any:
    if not isinstance(tree, dict):
        return tree
    out: dict = {}
    for path, leaf in _flat(tree):
        *parents, last = _rename(path, renames)
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = leaf
    return out


def to_current(tree: Any, layout: str) -> Any:
    """Nested dicts of `layout` with every old head moved to today's path."""
    return _convert(tree, LAYOUTS[layout])


def to_legacy(tree: Any, layout: str) -> Any:
    """Inverse of `to_current`: today's heads back at `layout`'s paths."""
    return _convert(tree, _inverse(layout))


def current_name(name: str) -> str:
    """The flat name of today's model for a flat name of any layout."""
    path = tuple(name.split("/"))
    for renames in LAYOUTS.values():
        if (renamed := _rename(path, renames)) != path:
            return "/".join(renamed)
    return name
