"""Where host round-trips happen: a transfer guard for implicit transfers
made from Python, and an audit of the compiled program for the host
callbacks and transfers compiled into it (docs/architecture.md)."""

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
from absl import logging

_CALLBACK_TARGET = re.compile(
    r'custom_call_target="([^"]*python[^"]*'
    r'callback[^"]*)"'
)
_HOST_TRANSFER_OP = re.compile(r"\s(send|recv|infeed|outfeed)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OP_TYPE = re.compile(r'op_type="([^"]*)"')


@dataclasses.dataclass(frozen=True)
class HostRoundTrip:
    """One operation of a compiled program that goes through the host."""

    kind: str  # 'host callback', 'host send', 'host recv', 'infeed', ...
    target: str  # custom-call target or HLO opcode
    op_name: str  # scope path from the metadata, e.g. 'rpn/nms/pure_callback'
    op_type: str  # e.g. 'pure_callback', 'debug_print'

    def __str__(self) -> str:
        return f"{self.kind} `{self.op_type or self.target}` at {self.op_name}"


class HostRoundTripError(RuntimeError):
    """A program meant to stay on the device goes through the host."""


# What the caller suggests doing about a finding ('' for nothing).
Advice = Callable[[HostRoundTrip], str]


_TRANSFORM_WRAPPER = re.compile(
    r"^(?:jvp|transpose|vmap|pjit|jit|remat|"
    r"checkpoint|shard_map)\((.*)\)$"
)


def _scope(op_name: str) -> str:
    """The scope path without transformation wrappers.

    'jit(step)/jvp(rpn)/nms/pure_callback' -> 'rpn/nms/pure_callback';
    'jit(step)/shard_map/rpn/nms/pure_callback' (a mesh of several devices)
    -> 'rpn/nms/pure_callback'.
    """
    parts = []
    for part in op_name.split("/"):
        if re.fullmatch(r"(?:p?jit|pmap|shard_map)(?:\(.*\))?", part):
            continue  # the traced function itself, or its shard_map
        while match := _TRANSFORM_WRAPPER.match(part):
            part = match.group(1)
        parts.append(part)
    return "/".join(parts) or op_name


def _parse_line(line: str) -> HostRoundTrip | None:
    target = _CALLBACK_TARGET.search(line)
    if target:
        kind, name = "host callback", target.group(1)
    else:
        op = _HOST_TRANSFER_OP.search(line)
        if not op:
            return None
        name = op.group(1)
        if name in ("send", "recv"):
            if "is_host_transfer=true" not in line:
                return None
            kind = f"host {name}"
        else:
            kind = name
    op_name = _OP_NAME.search(line)
    op_type = _OP_TYPE.search(line)
    scope = _scope(op_name.group(1)) if op_name else "<no metadata>"
    return HostRoundTrip(
        kind=kind,
        target=name,
        op_name=scope,
        op_type=op_type.group(1) if op_type else scope.rsplit("/", 1)[-1],
    )


def audit_hlo_text(hlo_text: str) -> list[HostRoundTrip]:
    """Host round-trips in the text of an optimised HLO module: host
    callbacks (pure_callback, io_callback, jax.debug.*: the custom calls
    `xla_ffi_python_{cpu,gpu}_callback`, their partitioned forms and the
    legacy `xla_python_*_callback`), host send/recv and infeed/outfeed."""
    findings = (_parse_line(line) for line in hlo_text.splitlines())
    return [f for f in findings if f is not None]


def audit_compiled(compiled: jax.stages.Compiled) -> list[HostRoundTrip]:
    """Host round-trips in a compiled program (from `lower(...).compile()`)."""
    return audit_hlo_text(compiled.as_text())


def audit(
    jitted: jax.stages.Wrapped, *args: Any, **kwargs: Any
) -> list[HostRoundTrip]:
    """Lowers and compiles `jitted` for these arguments, then audits it."""
    return audit_compiled(jitted.lower(*args, **kwargs).compile())


def compile_audited(
    jitted: jax.stages.Wrapped,
    *args: Any,
    program: str,
    strict: bool = False,
    advice: Advice | None = None,
) -> tuple[jax.stages.Compiled, list[HostRoundTrip]]:
    """Compiles `jitted` once, logs its host round-trips op by op.

    `advice` is passed on to `require_device_only` when `strict`.

    Returns:
      (compiled, findings): call `compiled` instead of `jitted` afterwards.

    Raises:
      HostRoundTripError: `strict` and the program has a host round-trip.
    """
    compiled = jitted.lower(*args).compile()
    findings = audit_compiled(compiled)
    logging.info("%s", describe(findings, program))
    if strict:
        require_device_only(findings, program, advice)
    return compiled, findings


def describe(findings: list[HostRoundTrip], program: str) -> str:
    """A multi-line report for the log, one finding per line."""
    if not findings:
        return f"{program}: no host round-trips (fully on device)"
    lines = [f"{program}: {len(findings)} host round-trip(s) per call:"]
    lines += [f"  - {f}" for f in findings]
    return "\n".join(lines)


def require_device_only(
    findings: list[HostRoundTrip], program: str, advice: Advice | None = None
) -> None:
    """Raises HostRoundTripError naming the first offending op.

    `advice(first finding)` may add what the user can do about it, in
    parentheses at the end of the message ('' adds nothing).
    """
    if findings:
        first = findings[0]
        others = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        hint = advice(first) if advice else ""
        raise HostRoundTripError(
            f"{program} is not device-only: {first}"
            f"{others}{f' ({hint})' if hint else ''}"
        )


@contextlib.contextmanager
def device_only_transfers() -> Iterator[None]:
    """Disallows implicit host<->device transfers; explicit ones still work."""
    with jax.transfer_guard("disallow"):
        yield
