"""detector/launch/console/logs.py and stderr_filter.py: library
chatter off, warnings and the project's own lines kept."""

import logging
import os
import pathlib
import threading

import pytest
from absl import logging as absl_logging

from detector.launch.console import logs, stderr_filter


def _record(name, level, pathname=__file__):
    return logging.LogRecord(name, level, pathname, 1, "message", (), None)


def _package_file(package: str) -> str:
    folder = logs._package_dir(package)
    assert folder, f"{package} is not installed"
    return str(pathlib.Path(folder) / "some_module.py")


@pytest.mark.parametrize(
    "name,package",
    [
        ("absl", "orbax"),  # orbax logs through absl's logger
        ("absl", "clu"),  # "Setting work unit notes"
        ("asyncio", None),
        ("matplotlib.font_manager", None),  # "generated new fontManager"
        ("jax._src.xla_bridge", None),  # "Unable to initialize backend"
        ("tensorflow", None),
    ],
)
def test_library_info_is_dropped_and_its_warnings_kept(name, package):
    if package:
        pytest.importorskip(package)
    pathname = _package_file(package) if package else __file__
    quiet = logs.LibraryFilter()
    assert not quiet.filter(_record(name, logging.INFO, pathname))
    assert not quiet.filter(_record(name, logging.DEBUG, pathname))
    assert quiet.filter(_record(name, logging.WARNING, pathname))
    assert quiet.filter(_record(name, logging.ERROR, pathname))


@pytest.mark.parametrize(
    "name", ["absl", "jax._src.compiler", "detector.engine", "asyncio2"]
)
def test_other_info_is_kept(name):
    assert logs.LibraryFilter().filter(_record(name, logging.INFO))


def test_quiet_libraries_installs_one_filter_and_verbosity_1_keeps_all(
    monkeypatch,
):
    handler = absl_logging.get_absl_handler()
    monkeypatch.setattr(handler, "filters", [])
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert not logs.quiet_libraries(1, native=False)
    assert logs.installed_filter() is None
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    assert logs.quiet_libraries(0, native=False)
    assert logs.quiet_libraries(0, native=False)
    assert len(handler.filters) == 2  # and the EscapingFilter
    assert isinstance(logs.installed_filter(), logs.LibraryFilter)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == logs.TF_CPP_LEVEL


def test_quiet_libraries_keeps_a_tf_log_level_the_user_set(monkeypatch):
    monkeypatch.setattr(absl_logging.get_absl_handler(), "filters", [])
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    logs.quiet_libraries(0, native=False)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


NATIVE_NOISE = [
    b"WARNING: All log messages before absl::InitializeLog() is called are "
    b"written to STDERR",
    b"I0000 00:00:1795629993.489383    4455 port.cc:153] oneDNN custom "
    b"operations are on.",
    b"W0000 00:00:1795629996.034064    4455 op_level_cost_estimator.cc:699] "
    b'Error in PredictCost() for the op: op: "CropAndResize"',
    b"I1125 18:06:35.675777 140552094100352 cpu_client.cc:467] TfrtCpuClient "
    b"created.",
]
NATIVE_KEPT = [
    b"W0000 00:00:1795629996.034064    4455 gpu_device.cc:2342] Cannot dlopen "
    b"some GPU libraries.",
    b"E0000 00:00:1795629996.034064    4455 cuda_dnn.cc:8310] Unable to "
    b"register cuDNN factory",
    b"F0000 00:00:1795629996.034064    4455 check.cc:1] Check failed: x",
    b"Fatal Python error: Segmentation fault",
    b"error: --workdir=/w: not writable",
]


def _filtered(data: bytes) -> bytes:
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    os.write(write_in, data)
    os.close(write_in)
    stderr_filter.filter_stream(read_in, write_out)
    os.close(read_in)
    os.close(write_out)
    with os.fdopen(read_out, "rb") as out:
        return out.read()


def test_stderr_filter_drops_native_noise_and_passes_the_rest():
    # Noise and kept lines alternate, then the rest of the kept ones.
    count = len(NATIVE_NOISE)
    pairs = zip(NATIVE_NOISE, NATIVE_KEPT[:count], strict=True)
    lines = [line for pair in pairs for line in pair] + NATIVE_KEPT[count:]
    # The last line has no newline: it still comes out.
    assert _filtered(b"\n".join(lines)) == b"\n".join(NATIVE_KEPT)


def test_stderr_filter_drops_libtpus_notes_of_a_host_without_a_tpu():
    """What libtpu 0.0.42 prints when it loads to compile for a topology."""
    notes = [
        b"Failed to find host bounds for accelerator type: WARNING: could "
        b"not determine TPU accelerator type, please set env var "
        b"`TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not "
        b"properly initialize.",
        b"WARNING: Logging before InitGoogle() is written to STDERR",
        b"E0000 00:00:1795914241.604410    9501 common_lib.cc:554] "
        b"INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: "
        b"could not determine TPU worker hostnames or IP addresses' from "
        b"env var TPU_WORKER_HOSTNAMES.",
        b"=== Source Location Trace: === ",
        b"learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327",
    ]
    kept = b"E0000 00:00:1795914241.6 9501 common_lib.cc:554] NOT_FOUND: x"
    assert _filtered(b"\n".join([*notes, kept, b""])) == kept + b"\n"


def test_stderr_filter_passes_a_partial_line_on_without_its_end():
    """A prompt or progress text without a newline is not held back."""
    read_in, write_in = os.pipe()
    read_out, write_out = os.pipe()
    worker = threading.Thread(
        target=stderr_filter.filter_stream, args=(read_in, write_out)
    )
    worker.start()
    try:
        os.write(write_in, b"kept\nno newline yet")
        got = b""
        while len(got) < len(b"kept\nno newline yet"):
            got += os.read(read_out, 100)  # while the input is still open
        assert got == b"kept\nno newline yet"
    finally:
        os.close(write_in)
        worker.join(5)
        for fd in (read_in, write_out, read_out):
            os.close(fd)


def test_control_characters_in_logged_file_names_are_escaped(monkeypatch):
    monkeypatch.setattr(absl_logging.get_absl_handler(), "filters", [])
    record = logging.LogRecord(
        "absl", logging.WARNING, __file__, 1, "%s: skipped", ("a\x1b[2J",), None
    )
    assert logs.EscapingFilter().filter(record)
    assert record.getMessage() == "a\\x1b[2J: skipped"
    logs.quiet_libraries(verbosity=1, native=False)
    handler = absl_logging.get_absl_handler()
    assert any(isinstance(f, logs.EscapingFilter) for f in handler.filters)


def test_a_logged_report_of_several_lines_keeps_its_line_breaks():
    record = logging.LogRecord(
        "absl", logging.INFO, __file__, 1, "%s", ("a:\n  - b\r",), None
    )
    assert logs.EscapingFilter().filter(record)
    assert record.getMessage() == "a:\n  - b\\r"


def test_one_line_errors_escape_control_characters(capsys):
    from detector.launch import cli

    with pytest.raises(SystemExit) as exit_:
        cli.fail("photos/a\x1b]0;x\x07.jpg: missing")
    assert exit_.value.code == "error: photos/a\\x1b]0;x\\x07.jpg: missing"


SLOW_COMPILE = [
    b"E1129 01:02:03.123456   4455 slow_operation_alarm.cc:140] ",
    b"********************************",
    b"[Compiling module jit_train_step] Very slow compile? If you want to "
    b"file a bug, run with envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and "
    b"attach the results.",
    b"********************************",
]


def test_xlas_slow_compile_banner_never_reaches_the_console():
    lines = [b"before", *SLOW_COMPILE, b"after", *SLOW_COMPILE]
    assert _filtered(b"\n".join(lines) + b"\n") == b"before\nafter\n"


def test_other_text_of_the_same_alarm_passes():
    """Only the whole banner goes; a block that breaks off is kept."""
    lines = [*SLOW_COMPILE[:2], b"Constant folding is taking > 1s", b"x"]
    assert _filtered(b"\n".join(lines) + b"\n") == b"\n".join(lines) + b"\n"
    cut = b"\n".join(SLOW_COMPILE[:3])  # the process ended inside it
    assert _filtered(cut) == cut
