"""Several JAX processes as one job: start-up (docs/multi-host.md) and the
collectives they exchange, which every process calls in the same order."""

import dataclasses
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

# How much longer than our own start-up limit JAX may wait before it aborts.
JAX_GRACE_S = 30
# Setting -> its environment variable; a flag wins over the variable.
ENV_VARS = {
    "coordinator_address": "JAX_COORDINATOR_ADDRESS",
    "num_processes": "JAX_NUM_PROCESSES",
    "process_id": "JAX_PROCESS_ID",
}


@dataclasses.dataclass(frozen=True)
class Cluster:
    """What this process knows of the job; None: left to JAX's detection."""

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    def is_multiprocess(self) -> bool:
        """Whether these settings ask for jax.distributed."""
        return bool(self.coordinator_address or (self.num_processes or 0) > 1)


def _setting(name: str, value: Any, env: Mapping[str, str]) -> tuple[Any, str]:
    """(value, where it came from): the flag's, else the environment's."""
    if value is not None and value != "":
        return value, f"--{name}"
    raw = env.get(ENV_VARS[name], "").strip()
    return (raw or None), ENV_VARS[name]


def _as_int(name: str, value: Any, source: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"{source}={value!r}: {name} must be an integer"
        ) from None


def _check_address(address: str, source: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"{source}={address!r}: expected HOST:PORT, e.g. "
            "10.0.0.1:1234 (the host of process 0)"
        )


def resolve_cluster(
    coordinator_address: str | None,
    num_processes: int | None,
    process_id: int | None,
    env: Mapping[str, str],
) -> Cluster:
    """The job's settings from flags (None: unset) and the environment.

    Raises:
      ValueError: a malformed address, a count below 1 or an id outside
        [0, count), naming the flag or variable it came from.
    """
    address, address_source = _setting(
        "coordinator_address", coordinator_address, env
    )
    count, count_source = _setting("num_processes", num_processes, env)
    index, index_source = _setting("process_id", process_id, env)
    count = _as_int("num_processes", count, count_source)
    index = _as_int("process_id", index, index_source)
    if address is not None:
        _check_address(address, address_source)
    if count is not None and count < 1:
        raise ValueError(
            f"{count_source}={count}: the process count must be at least 1"
        )
    if index is not None and (
        index < 0 or (count is not None and index >= count)
    ):
        bound = f"[0, {count}) ({count_source}={count})" if count else ">= 0"
        raise ValueError(
            f"{index_source}={index}: the process id must be in {bound}"
        )
    return Cluster(address, count, index)


def wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Polls until process 0's coordinator accepts connections.

    JAX aborts the whole process (no exception) when it cannot reach the
    coordinator, so the other processes check it first.

    Raises:
      TimeoutError: nothing listens at `address` after `timeout_s` seconds.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            reason = e.strerror or type(e).__name__
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"--coordinator_address={address}: no coordinator answered "
                f"within {timeout_s:g} s ({reason}); start process 0 there, "
                "or check the address and the firewall"
            )
        time.sleep(0.2)


def _stuck_message(cluster: Cluster, timeout_s: float) -> str:
    """Why start-up did not finish: some process never joined the job."""
    where = cluster.coordinator_address or "the coordinator"
    count = cluster.num_processes
    who = f"all {count} processes" if count else "every process of the job"
    ids = f" (ids 0..{count - 1})" if count else ""
    return (
        f"--coordinator_timeout_s={timeout_s:g}: not {who} joined the job "
        f"at {where} within {timeout_s:g} s; start every process{ids} "
        "with the same --coordinator_address and --num_processes"
    )


def initialize(
    cluster: Cluster,
    timeout_s: float,
    on_stuck: Callable[[str], None] | None = None,
) -> None:
    """jax.distributed.initialize for `cluster`, waiting `timeout_s` s.

    Every process waits until all of them have joined. JAX aborts a process
    whose peers do not join in time (no exception), so past `timeout_s` a
    watchdog thread calls `on_stuck(message)` first; it must end the process
    (the entry points print the message as their one error line). JAX's own
    limit is set `JAX_GRACE_S` later.

    Raises:
      TimeoutError: (processes other than 0) the coordinator is unreachable.
      RuntimeError, ValueError: JAX's start-up failed (e.g. the
        coordinator's port is taken, or settings it could not detect).
    """
    if cluster.coordinator_address and cluster.process_id not in (None, 0):
        wait_for_coordinator(cluster.coordinator_address, timeout_s)
    joined = threading.Event()

    def watch() -> None:
        if not joined.wait(timeout_s):
            on_stuck(_stuck_message(cluster, timeout_s))

    if on_stuck is not None:
        threading.Thread(
            target=watch, name="join-watchdog", daemon=True
        ).start()
    try:
        jax.distributed.initialize(
            coordinator_address=cluster.coordinator_address,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
            initialization_timeout=int(timeout_s + JAX_GRACE_S),
        )
    finally:
        joined.set()


def _allgather_bytes(data: bytes) -> list[bytes]:
    """Every process's `data`, in process order (a collective)."""
    buffer = np.frombuffer(data, np.uint8)
    with jax.transfer_guard("allow"):  # host values in, host values out
        sizes = multihost_utils.process_allgather(np.int64(buffer.size))
        padded = np.zeros(int(np.max(sizes)), np.uint8)
        padded[: buffer.size] = buffer
        rows = multihost_utils.process_allgather(padded)
    return [bytes(row[:size]) for row, size in zip(rows, sizes, strict=True)]


def gather_json(value: Any) -> list[Any]:
    """Every process's JSON-serialisable `value`, in process order."""
    if jax.process_count() == 1:
        return [value]
    return [
        json.loads(part)
        for part in _allgather_bytes(json.dumps(value).encode())
    ]


def config_hash(config: ml_collections.ConfigDict) -> str:
    """sha256 of the config's canonical JSON (sorted keys)."""
    text = config.to_json_best_effort(sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def check_same_config(config: ml_collections.ConfigDict) -> None:
    """Every process must run the same config (a collective).

    Raises:
      ValueError: on every process, naming the first process whose config
        hash differs from process 0's.
    """
    if jax.process_count() == 1:
        return
    hashes = [
        part.decode() for part in _allgather_bytes(config_hash(config).encode())
    ]
    for index, digest in enumerate(hashes):
        if digest != hashes[0]:
            raise ValueError(
                f"the config differs across processes: process {index} has "
                f"config hash {digest[:12]}, process 0 has {hashes[0][:12]}; "
                "start every process with the same --config, overrides and "
                "--nms"
            )
