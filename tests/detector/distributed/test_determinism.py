"""detector/distributed/determinism.py: the XLA flag, appended once, before a
backend."""

import jax
import pytest

from detector.distributed import determinism


def test_flag_is_appended_to_existing_xla_flags_once():
    assert determinism.with_flag(None) == determinism.FLAG
    flag = determinism.FLAG
    assert determinism.with_flag("--a=1  --b") == f"--a=1 --b {flag}"
    once = determinism.with_flag("--a=1")
    assert determinism.with_flag(once) == once
    # A later =false wins in XLA, so the flag is appended again after it.
    off = f"{determinism.FLAG} --xla_gpu_deterministic_ops=false"
    assert determinism.with_flag(off) == f"{off} {determinism.FLAG}"


def test_enabled_reads_the_last_setting(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    assert not determinism.enabled()
    monkeypatch.setenv("XLA_FLAGS", f"--a {determinism.FLAG}")
    assert determinism.enabled()
    monkeypatch.delenv("XLA_FLAGS")
    assert not determinism.enabled()


def test_apply_after_a_backend_started_is_an_error(monkeypatch):
    jax.devices()  # a backend is up
    monkeypatch.setenv("XLA_FLAGS", "--a=1")
    determinism.apply(False)  # nothing asked, nothing changes
    assert not determinism.enabled()
    with pytest.raises(
        RuntimeError,
        match="config.train.deterministic=True "
        "must be applied before JAX starts a backend",
    ):
        determinism.apply(True)
    monkeypatch.setenv("XLA_FLAGS", determinism.FLAG)
    determinism.apply(True)  # already in effect: fine
