"""Every process of a job runs one config: the hash check, in process (the
two-process run of train.py is the slow stage's
tests/test_multihost.py::test_mismatched_configs_fail_on_every_process_before_writing)."""

import hashlib

import jax
import pytest

from detector import config as config_lib
from detector.distributed import multihost


def _two_processes(monkeypatch, hashes: list[str]) -> None:
    """This process as one of two, the allgather answering `hashes`."""
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(
        multihost, "_allgather_bytes", lambda data: [h.encode() for h in hashes]
    )


def test_one_config_on_every_process_passes(monkeypatch):
    config = config_lib.base_config()
    digest = multihost.config_hash(config)
    _two_processes(monkeypatch, [digest, digest])
    multihost.check_same_config(config)


def test_a_differing_process_is_named_with_both_hashes(monkeypatch):
    config = config_lib.base_config()
    digest = multihost.config_hash(config)
    other = hashlib.sha256(b"another config").hexdigest()
    _two_processes(monkeypatch, [digest, other])
    with pytest.raises(
        ValueError,
        match=rf"^the config differs across processes: process 1 has config "
        rf"hash {other[:12]}, process 0 has {digest[:12]}; start every "
        r"process with the same --config, overrides and --nms$",
    ):
        multihost.check_same_config(config)


def test_the_hash_follows_every_field():
    config = config_lib.base_config()
    changed = config_lib.base_config()
    changed.train.num_steps += 1
    assert multihost.config_hash(config) != multihost.config_hash(changed)
    assert multihost.config_hash(config) == multihost.config_hash(
        config_lib.base_config()
    )
