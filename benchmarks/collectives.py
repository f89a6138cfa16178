"""The collectives of a compiled XLA program (its HLO text) and the bytes
each moves per chip: what the partitioner and the compiler inserted for
the data-parallel train step (docs/tpu.md, "Multi-host")."""

import re
from typing import NamedTuple

_OPS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
)
# `%name = <result shapes> op(` with op an async -start or the sync op; a
# -done only ends a -start, so it is not counted again.
_LINE = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>\S+)\s*=\s*(?P<shapes>.+?)\s+"
    rf"(?P<op>{'|'.join(_OPS)})(?:-start)?\("
)
_SHAPE = re.compile(r"\b(pred|[subf]\d+|bf16|f8e\w+)\[([\d,]*)\]")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_GROUPS = re.compile(r"replica_groups=(\{[^=]*?\}\}|\[[^\]]*\]<=\[[^\]]*\])")
_BITS = {"pred": 8, "bf16": 16}


class Collective(NamedTuple):
    """One collective of a compiled program."""

    op: str  # all-reduce, all-gather, ...
    bytes: int  # of its result, per chip
    arrays: int  # arrays it moves at once (combined by the compiler)
    source: str  # the jax op_name it came from (the first, if combined)
    groups: str  # replica_groups: which chips take part


def _bytes(dtype: str, dims: str) -> int:
    count = 1
    for d in filter(None, dims.split(",")):
        count *= int(d)
    bits = _BITS.get(dtype) or int(re.sub(r"\D", "", dtype) or 8)
    return count * bits // 8


def collectives(hlo: str) -> list[Collective]:
    """The collectives of HLO text `hlo`, in program order."""
    found = []
    for text in hlo.splitlines():
        match = _LINE.match(text)
        if not match:
            continue
        shapes = _SHAPE.findall(match["shapes"])
        if match["op"] != "all-reduce" and len(shapes) > 1:
            shapes = shapes[len(shapes) // 2 :]  # (operands, results)
        source = _OP_NAME.search(text)
        groups = _GROUPS.search(text)
        found.append(
            Collective(
                match["op"],
                sum(_bytes(*s) for s in shapes),
                len(shapes),
                source.group(1) if source else "",
                groups.group(1) if groups else "",
            )
        )
    return found


def table(found: list[Collective]) -> str:
    """A markdown table of `found`, largest first, and their total."""
    lines = [
        "| collective | MiB/chip | arrays | from (jax op) | replica groups |",
        "|---|---|---|---|---|",
    ]
    for c in sorted(found, key=lambda c: -c.bytes):
        groups = c.groups if len(c.groups) <= 40 else c.groups[:37] + "..."
        lines.append(
            f"| {c.op} | {c.bytes / 2**20:.3f} | {c.arrays} | "
            f"{_short(c.source)} | {groups} |"
        )
    total = sum(c.bytes for c in found) / 2**20
    lines.append(f"| total ({len(found)}) | {total:.2f} | | | |")
    return "\n".join(lines)


def _short(op_name: str, parts: int = 4) -> str:
    """The last `parts` components of a jax op_name."""
    return "/".join(op_name.split("/")[-parts:])
