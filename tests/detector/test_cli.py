"""Command-line plumbing: one-line errors and the multi-host decision."""

import jax
import pytest

from detector import cli


@pytest.mark.parametrize("mode,env,expected", [
    ("off", {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}, False),
    ("on", {}, True),
    ("auto", {}, False),
    ("auto", {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}, True),
    ("auto", {"JAX_COORDINATOR_ADDRESS": " "}, False),
    ("auto", {"TPU_WORKER_HOSTNAMES": "t1k-w-0,t1k-w-1"}, True),
    ("auto", {"TPU_WORKER_HOSTNAMES": "localhost"}, False),  # one host
    ("auto", {"SLURM_NTASKS": "4"}, True),
    ("auto", {"SLURM_NTASKS": "1"}, False),
    ("auto", {"SLURM_NTASKS": "many"}, False),
    ("auto", {"OMPI_COMM_WORLD_SIZE": "2"}, True),
])
def test_wants_distributed(mode, env, expected):
    assert cli.wants_distributed(mode, env) is expected


def test_wants_distributed_rejects_unknown_mode():
    with pytest.raises(ValueError, match=r"--multihost='yes' is not known; "
                       r"choose one of auto, on, off"):
        cli.wants_distributed("yes", {})


def test_start_multihost_calls_initialize_only_when_wanted(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize",
                        lambda: calls.append("init"))
    assert not cli.start_multihost("auto", {"SLURM_NTASKS": "1"})
    assert calls == []
    assert cli.start_multihost("auto", {"SLURM_NTASKS": "2"})
    assert calls == ["init"]


def test_failed_multihost_start_is_one_line(monkeypatch):
    def refuse():
        raise RuntimeError("coordinator unreachable\ntimed out after 300 s")

    monkeypatch.setattr(jax.distributed, "initialize", refuse)
    with pytest.raises(SystemExit) as exit_info:
        cli.start_multihost("on", {})
    assert exit_info.value.code == ("error: --multihost=on: jax.distributed."
                                    "initialize() failed: coordinator "
                                    "unreachable timed out after 300 s")


@pytest.mark.parametrize("error,line", [
    (PermissionError(13, "Permission denied", "/data/coco/train2017"),
     "error: /data/coco/train2017: Permission denied"),
    (FileNotFoundError("/w/config.json: no config.json here"),
     "error: /w/config.json: no config.json here"),
    (ValueError("config.train.batch_size=3 must be divisible by 2"),
     "error: config.train.batch_size=3 must be divisible by 2"),
    (FloatingPointError("total loss is nan at step 3"),
     "error: total loss is nan at step 3"),
    (ValueError("data.root is empty;\n  set it"),
     "error: data.root is empty; set it"),  # always one line
])
def test_one_line_errors(error, line):
    with (pytest.raises(SystemExit) as exit_info,
          cli.one_line_errors(FloatingPointError)):
        raise error
    assert exit_info.value.code == line


def test_one_line_errors_lets_other_errors_through():
    with pytest.raises(KeyError), cli.one_line_errors():
        raise KeyError("not a user error")
