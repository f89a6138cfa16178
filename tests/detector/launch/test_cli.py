"""Command-line plumbing: one-line errors and the multi-host decision."""

import functools
import pathlib
import socket
import subprocess
import sys
import time

import jax
import pytest

from detector import config as config_lib
from detector.distributed import multihost
from detector.launch import cli

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "mode,env,expected",
    [
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
    ],
)
def test_wants_distributed(mode, env, expected):
    assert cli.wants_distributed(mode, env) is expected


def test_wants_distributed_rejects_unknown_mode():
    with pytest.raises(
        ValueError,
        match=r"--multihost='yes' is not known; "
        r"choose one of auto, on, off",
    ):
        cli.wants_distributed("yes", {})


def test_start_multihost_calls_initialize_only_when_wanted(monkeypatch):
    calls = []
    monkeypatch.setattr(
        jax.distributed, "initialize", lambda **kwargs: calls.append("init")
    )
    assert not cli.start_multihost("auto", {"SLURM_NTASKS": "1"})
    assert calls == []
    assert cli.start_multihost("auto", {"SLURM_NTASKS": "2"})
    assert calls == ["init"]


def test_failed_multihost_start_is_one_line(monkeypatch):
    def refuse(**kwargs):
        raise RuntimeError("coordinator unreachable\ntimed out after 300 s")

    monkeypatch.setattr(jax.distributed, "initialize", refuse)
    with pytest.raises(SystemExit) as exit_info:
        cli.start_multihost("on", {})
    assert exit_info.value.code == (
        "error: --multihost=on: jax.distributed."
        "initialize() failed: coordinator "
        "unreachable timed out after 300 s"
    )


def test_start_multihost_passes_the_cluster(monkeypatch):
    calls = []
    monkeypatch.setattr(
        jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs)
    )
    cluster = multihost.Cluster("localhost:1234", 2, 0)
    assert cli.wants_distributed("auto", {}, cluster)
    assert not cli.wants_distributed(
        "auto", {}, multihost.Cluster(num_processes=1)
    )
    assert cli.start_multihost("auto", {}, cluster=cluster, timeout_s=7)
    assert calls == [
        {
            "coordinator_address": "localhost:1234",
            "num_processes": 2,
            "process_id": 0,
            # JAX's own limit (it aborts) comes after our watchdog's.
            "initialization_timeout": 7 + multihost.JAX_GRACE_S,
        }
    ]


def test_processes_that_do_not_all_join_are_reported_before_jax_aborts(
    monkeypatch,
):
    def never_joined(**kwargs):
        time.sleep(1.5)  # JAX's wait, cut short

    monkeypatch.setattr(jax.distributed, "initialize", never_joined)
    reports = []
    cluster = multihost.Cluster("localhost:1234", 3, 0)
    multihost.initialize(cluster, 0.2, on_stuck=reports.append)
    assert reports == [
        "--coordinator_timeout_s=0.2: not all 3 processes joined the job at "
        "localhost:1234 within 0.2 s; start every process (ids 0..2) with "
        "the same --coordinator_address and --num_processes"
    ]
    reports.clear()  # a start that finishes in time reports nothing
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: None)
    multihost.initialize(cluster, 0.2, on_stuck=reports.append)
    time.sleep(0.4)
    assert reports == []


def test_resolve_cluster_flags_win_over_environment():
    env = {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:99",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
    }
    assert multihost.resolve_cluster(None, None, None, env) == (
        multihost.Cluster("10.0.0.1:99", 4, 3)
    )
    assert multihost.resolve_cluster("h:1", 2, 1, env) == (
        multihost.Cluster("h:1", 2, 1)
    )
    assert multihost.resolve_cluster(None, None, None, {}) == (
        multihost.Cluster()
    )


@pytest.mark.parametrize(
    "args,env,message",
    [
        (
            ("localhost", None, None),
            {},
            "--coordinator_address='localhost': expected HOST:PORT",
        ),
        (
            (None, None, None),
            {"JAX_COORDINATOR_ADDRESS": "h:99999"},
            "JAX_COORDINATOR_ADDRESS='h:99999': expected HOST:PORT",
        ),
        (
            (None, 0, None),
            {},
            "--num_processes=0: the process count must be at least 1",
        ),
        (
            (None, 2, 2),
            {},
            (
                "--process_id=2: the process id must be in [0, 2) "
                "(--num_processes=2)"
            ),
        ),
        (
            (None, None, 5),
            {"JAX_NUM_PROCESSES": "2"},
            (
                "--process_id=5: the process id must be in [0, 2) "
                "(JAX_NUM_PROCESSES=2)"
            ),
        ),
        (
            (None, None, None),
            {"JAX_PROCESS_ID": "one"},
            "JAX_PROCESS_ID='one': process_id must be an integer",
        ),
    ],
)
def test_resolve_cluster_rejects_bad_settings(args, env, message):
    with pytest.raises(ValueError) as error:
        multihost.resolve_cluster(*args, env)
    assert str(error.value).startswith(message)


def test_unreachable_coordinator_times_out_with_one_line(monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("localhost", 0))
        address = f"localhost:{probe.getsockname()[1]}"
    monkeypatch.setattr(jax.distributed, "initialize", pytest.fail)
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        cli.start_multihost(
            "auto", {}, cluster=multihost.Cluster(address, 2, 1), timeout_s=1
        )
    assert time.monotonic() - started < 5
    assert exit_info.value.code.startswith(
        f"error: --coordinator_address={address}: no coordinator answered "
        "within 1 s"
    )


@pytest.mark.parametrize(
    "error,line",
    [
        (
            PermissionError(13, "Permission denied", "/data/coco/train2017"),
            "error: /data/coco/train2017: Permission denied",
        ),
        (
            FileNotFoundError("/w/config.json: no config.json here"),
            "error: /w/config.json: no config.json here",
        ),
        (
            ValueError("config.train.batch_size=3 must be divisible by 2"),
            "error: config.train.batch_size=3 must be divisible by 2",
        ),
        (
            FloatingPointError("total loss is nan at step 3"),
            "error: total loss is nan at step 3",
        ),
        (
            ValueError("data.root is empty;\n  set it"),
            "error: data.root is empty; set it",
        ),  # always one line
    ],
)
def test_one_line_errors(error, line):
    with (
        pytest.raises(SystemExit) as exit_info,
        cli.one_line_errors(FloatingPointError),
    ):
        raise error
    assert exit_info.value.code == line


def test_an_at_once_error_ends_the_process_without_cleanup(monkeypatch):
    ended = []
    monkeypatch.setattr(cli, "fail_now", ended.append)
    with cli.one_line_errors(at_once=(FloatingPointError,)):
        raise FloatingPointError("the checkpoint of step 2 could not\n be")
    assert ended == ["the checkpoint of step 2 could not be"]


def test_one_line_errors_lets_other_errors_through():
    with pytest.raises(KeyError), cli.one_line_errors():
        raise KeyError("not a user error")


def test_set_nms_backend_points_both_sites_and_names_the_flag():
    config = config_lib.base_config()
    cli.set_nms_backend(config, "while_loop")
    assert (
        config.model.rpn.nms_backend,
        config.model.detection.nms_backend,
    ) == ("while_loop", "while_loop")
    with pytest.raises(
        ValueError, match=r"^--nms='topk' is not a known NMS backend"
    ):
        cli.set_nms_backend(config, "topk")
    cli.set_nms_backend(config, "topk", allow_baselines=True)
    assert config.model.rpn.nms_backend == "topk"


# Each entry point and flags its --help lists: its own, and those that
# cli.py defines for it.
ENTRY_POINT_FLAGS = {
    "train.py": ("--config", "--workdir", "--nms", "--[no]print_config"),
    "eval.py": ("--config", "--workdir", "--split", "--[no]print_config"),
    "export.py": ("--config", "--workdir", "--out", "--platforms"),
    "predict.py": ("--workdir", "--exported", "--out", "--batch_size"),
}
# Listed by --helpfull only: multi-host start-up.
HELPFULL_ONLY = {"train.py": "--multihost", "eval.py": "--multihost"}


@functools.cache
def _help(script: str, flag: str) -> subprocess.CompletedProcess:
    """`python SCRIPT FLAG`, run once per module for the tests below."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("script", sorted(ENTRY_POINT_FLAGS))
@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
def test_help_lists_the_programs_own_flags_and_exits_0(script, flag):
    done = _help(script, flag)
    assert done.returncode == 0, done.stderr[-2000:]
    for listed in ENTRY_POINT_FLAGS[script]:
        assert f"  {listed}" in done.stdout, (listed, done.stdout)
    if script in HELPFULL_ONLY:
        listed = f"  {HELPFULL_ONLY[script]}" in done.stdout
        assert listed == (flag == "--helpfull"), done.stdout
        assert "--config.<section>.<field>=VALUE" in done.stdout


@pytest.mark.parametrize("script", ["eval.py", "export.py"])
def test_help_examples_keep_their_lines(script):
    done = _help(script, "--help")
    continued = [
        line for line in done.stdout.splitlines() if line.endswith("\\")
    ]
    assert continued, done.stdout  # the example's continuation is kept
    assert all(line.startswith("  python ") for line in continued)


@pytest.mark.parametrize(
    "text, plain",
    [
        (
            "ValueError: configs/shapes.py: unknown variant 'huge'; known: "
            "runlocal",
            "configs/shapes.py: unknown variant 'huge'; known: runlocal",
        ),
        (
            "[Errno 2] No such file or directory: 'configs/missing.py'",
            "configs/missing.py: No such file or directory",
        ),
        (
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1",
            "Expecting value: line 1 column 1",
        ),
        ("config.train.x=1: must be >= 2", "config.train.x=1: must be >= 2"),
    ],
)
def test_library_error_text_becomes_a_plain_sentence(text, plain):
    assert cli.plain(text) == plain


@pytest.mark.parametrize(
    "flag, name", [("pallas_mosaic_gpu", "--nms"), (None, "config.model.")]
)
def test_an_nms_backend_eval_cannot_run_here_is_refused_up_front(flag, name):
    config = config_lib.base_config()
    config.model.rpn.nms_backend = "pallas_mosaic_gpu"
    config.model.detection.nms_backend = "pallas_mosaic_gpu"
    with pytest.raises(ValueError) as info:
        cli.check_nms_under_guard(config, "cpu", flag)
    assert str(info.value).startswith(f"{name}")
    assert str(info.value).endswith(
        "=pallas_mosaic_gpu: on cpu it runs the Mosaic GPU kernel in Pallas' "
        "GPU interpret mode, whose host callbacks the evaluation's "
        "device-only transfer guard stops; evaluate with --nms=auto here, and "
        "pallas_mosaic_gpu on a GPU"
    )
    cli.check_nms_under_guard(config, "cuda", flag)  # runs there
    config.model.rpn.nms_backend = "pallas"
    config.model.detection.nms_backend = "auto"
    cli.check_nms_under_guard(config, "cpu", None)
