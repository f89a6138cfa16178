"""Command-line plumbing shared by the entry points: one-line errors, the
--config and --nms flags, and multi-host start-up before JAX starts a
backend."""

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Mapping

import ml_collections
from absl import app, flags

from detector import config as config_lib
from detector.distributed import determinism, multihost, peers
from detector.launch import config_file, config_help
from detector.launch.console import usage
from detector.utils import text
from ops import nms

MULTIHOST_MODES = ("auto", "on", "off")
# MultihostFlags' flags: listed by --helpfull, not --help.
MULTIHOST_FLAGS = (
    "multihost",
    "coordinator_address",
    "num_processes",
    "process_id",
    "coordinator_timeout_s",
)
MULTIHOST_HELP = (
    "Multi-host start-up. 'on': always call jax.distributed.initialize() "
    "(with --coordinator_address, --num_processes and --process_id where "
    "given, else from the cluster environment); 'off': never (one process). "
    "'auto': call it when a coordinator address or more than one process is "
    "given (flags or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES) or the "
    "environment is a multi-host job: a Cloud TPU slice with several hosts "
    "(TPU_WORKER_HOSTNAMES), a SLURM job with SLURM_NTASKS > 1, or an Open "
    "MPI job with OMPI_COMM_WORLD_SIZE > 1."
)
# How config_flags starts the error of a config file that failed to load.
_LOAD_FAILED = "Configuration is not available because of an earlier failure"
_LOAD_FAILED += " to load:"
# An exception's name before its text ('ValueError: ...'), as config_flags
# passes a config file's error on; and an OSError's text.
_EXCEPTION_NAME = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")
_ERRNO = re.compile(r"^\[Errno \d+\] (?P<reason>[^:]+): '(?P<path>.*)'$")
# JAX's own default wait for the coordinator and the other processes.
COORDINATOR_TIMEOUT_S = 300


def check_no_arguments(argv: list[str]) -> None:
    """Raises app.UsageError listing argv's positional arguments, if any."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")


def fail(message: str) -> None:
    """Exits with `error: <message>` on stderr and status 1."""
    sys.exit(f"error: {text.printable(message)}")


def fail_now(message: str) -> None:
    """As `fail`, from any thread: ends the process at once (no cleanup)."""
    sys.stderr.write(f"error: {text.printable(message)}\n")
    sys.stderr.flush()
    os._exit(1)


def _one_line(error: BaseException, *, last_only: bool = False) -> str:
    """The message of `error` on one line: its lines joined, or only the
    last one (`last_only`, for flag and config errors, whose last line says
    what is wrong)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines[-1:] if last_only else lines)
    return plain(text) or type(error).__name__


def plain(text: str) -> str:
    """A library's error text as a sentence: no exception name in front,
    "[Errno 2] No such file or directory: 'x'" as 'x: No such file or
    directory'."""
    text = _EXCEPTION_NAME.sub("", text)
    errno = _ERRNO.match(text)
    return f"{errno['path']}: {errno['reason']}" if errno else text


def define_config(
    name: str, default: str | None, help_text: str
) -> flags.FlagHolder:
    """config_flags.DEFINE_config_file, failing cleanly on a bad override.

    config_flags applies `--config.a.b=v` overrides while the flag is being
    defined, so an unknown key surfaces here; a config file that fails to
    load is one line (config_file.py).
    """
    help_text += " " + config_help.override_help(config_lib.base_config())
    try:
        return config_file.define(name, default, help_text)
    except config_file.ConfigFileError as e:
        fail(str(e))
    except (AttributeError, KeyError) as e:
        fail(_unknown_field(e, sys.argv[1:]))


def _unknown_field(error: AttributeError | KeyError, argv: list[str]) -> str:
    """'--config.a.b=v: 'b' is not a config field; did you mean ...?', the
    suggestions searched in every section of the schema."""
    key = re.search(r"\w+", str(error))
    key = key.group(0) if key else "?"
    arg = next(
        (
            a
            for a in argv
            if a.startswith("--") and key in a.split("=")[0].split(".")[1:]
        ),
        "--config",
    )
    return config_help.unknown_field_line(arg, key, config_lib.base_config())


def define_print_config() -> flags.FlagHolder:
    """The --print_config flag of train.py and eval.py."""
    return flags.DEFINE_bool(
        "print_config",
        False,
        "Print the resolved config (the file, its variants, the "
        "--config.* overrides and --nms applied) as JSON and exit; "
        "--config=<that file>.json reads it back.",
    )


def parse_flags(argv: list[str]) -> list[str]:
    """absl flags parser for app.run: one line per parse error; --help
    lists the program's flags, --config included, and exits with 0
    (usage.py).

    With an explicit `--config=file`, the `--config.a.b=v` overrides are
    applied while the flags are parsed, so an unknown key surfaces here.
    """
    return usage.parse(argv, _parse_flags, helpfull_only=MULTIHOST_FLAGS)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(_one_line(e, last_only=True))
    except (AttributeError, KeyError) as e:
        fail(_unknown_field(e, argv[1:]))
    except OSError as e:  # overrides onto a config file that did not load
        fail(_load_error(e))


def config_value(flag: flags.FlagHolder) -> ml_collections.ConfigDict:
    """The loaded config of a config flag; a load failure is one line."""
    try:
        config = flag.value
        config.keys()  # a config that failed to load raises on first use
        return config
    except (OSError, ValueError, AttributeError, KeyError) as e:
        fail(f"--{flag.name}: {_load_error(e)}")


def _load_error(error: Exception) -> str:
    """The reason a config file did not load, without config_flags' preface."""
    return _one_line(error, last_only=True).removeprefix(_LOAD_FAILED).strip()


def os_error_message(error: OSError) -> str:
    """'<path>: <reason>' for an OSError that names a file, else its text."""
    if not error.filename:
        return _one_line(error)
    paths = str(error.filename) + (
        f" -> {error.filename2}" if error.filename2 else ""
    )
    return f"{paths}: {error.strerror or type(error).__name__}"


@contextlib.contextmanager
def one_line_errors(
    *errors: type[Exception], at_once: tuple[type[Exception], ...] = ()
) -> Iterator[None]:
    """Ends the program with one error line on ValueError, OSError, `errors`.

    An OSError names its path (`error: /data/shapes: Permission denied`);
    the others print their message. An error of `at_once` ends the process
    at once (`fail_now`): threads it left behind cannot hold the exit (a
    failed checkpoint save's, which wait minutes for a folder that will
    never exist).
    """
    try:
        yield
    except at_once as e:
        sys.stdout.flush()
        fail_now(_one_line(e))
    except OSError as e:
        fail(os_error_message(e))
    except (ValueError, *errors) as e:
        fail(_one_line(e))


def define_nms(help_text: str) -> flags.FlagHolder:
    """The --nms flag: a name of ops.nms.BACKENDS, or None (the config's)."""
    return flags.DEFINE_enum("nms", None, nms.BACKENDS, help_text)


def set_nms_backend(
    config: ml_collections.ConfigDict,
    backend: str,
    *,
    allow_baselines: bool = False,
) -> None:
    """Points both NMS sites (RPN proposals, detections) at `backend` (the
    --nms flag's value; ValueError naming it for an unknown name).

    `allow_baselines` also admits ops.nms.BASELINES ('topk', no
    suppression), which benchmarks use to measure what NMS costs.
    """
    nms.check_backend(backend, name="--nms", baselines=allow_baselines)
    config.model.rpn.nms_backend = backend
    config.model.detection.nms_backend = backend


def check_nms_under_guard(
    config: ml_collections.ConfigDict, platform: str, flag: str | None
) -> None:
    """Raises ValueError when an NMS site's backend cannot run on
    `platform` under eval's device-only transfer guard
    (ops.nms.HOST_CALLBACKS), naming --nms (`flag`, its value) or the
    config key: refused before anything loads, not after the compile."""
    for key in ("model.rpn.nms_backend", "model.detection.nms_backend"):
        section, site, field = key.split(".")
        backend = config[section][site][field]
        why = nms.HOST_CALLBACKS.get((platform, backend))
        if why is None:
            continue
        name = "--nms" if flag else f"config.{key}"
        raise ValueError(
            f"{name}={backend}: on {platform} it {why} the evaluation's "
            "device-only transfer guard stops; evaluate with --nms=auto "
            f"here, and {backend} on a GPU"
        )


def _env_count(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name, "").strip() or 0)
    except ValueError:
        return 0


def wants_distributed(
    mode: str, env: Mapping[str, str], cluster: multihost.Cluster | None = None
) -> bool:
    """Whether `--multihost=mode` in environment `env` starts multi-host JAX.

    Raises:
      ValueError: `mode` is not one of MULTIHOST_MODES.
    """
    if mode not in MULTIHOST_MODES:
        raise ValueError(
            f"--multihost={mode!r} is not known; choose one of "
            f"{', '.join(MULTIHOST_MODES)}"
        )
    if mode != "auto":
        return mode == "on"
    tpu_hosts = [
        h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()
    ]
    return bool(
        (cluster and cluster.is_multiprocess())
        or env.get("JAX_COORDINATOR_ADDRESS", "").strip()
        or len(tpu_hosts) > 1
        or _env_count(env, "SLURM_NTASKS") > 1
        or _env_count(env, "OMPI_COMM_WORLD_SIZE") > 1
    )


def start_multihost(
    mode: str,
    env: Mapping[str, str] | None = None,
    *,
    cluster: multihost.Cluster | None = None,
    timeout_s: int = COORDINATOR_TIMEOUT_S,
) -> bool:
    """Calls jax.distributed.initialize() when `wants_distributed` says so.

    Must run before anything touches a device. Returns whether it did; a
    failed start-up (an unreachable coordinator, or processes that did not
    all join, after `timeout_s` seconds) is one error line.
    """
    if not wants_distributed(mode, os.environ if env is None else env, cluster):
        return False
    try:
        multihost.initialize(
            cluster or multihost.Cluster(), timeout_s, on_stuck=fail_now
        )
    except TimeoutError as e:
        fail(str(e))
    except (RuntimeError, ValueError) as e:
        fail(
            f"--multihost={mode}: jax.distributed.initialize() failed: "
            f"{_one_line(e)}"
        )
    peers.watch(on_lost=fail_now)  # a lost process ends this one in a line
    return True


class MultihostFlags:
    """The multi-host flags of an entry point, and the start-up they ask for.

    Defined once per program (absl flags are global).
    """

    def __init__(self):
        self.mode = flags.DEFINE_enum(
            "multihost", "auto", MULTIHOST_MODES, MULTIHOST_HELP
        )
        self.coordinator_address = flags.DEFINE_string(
            "coordinator_address",
            None,
            "HOST:PORT of process 0, which hosts the coordinator (default: "
            "$JAX_COORDINATOR_ADDRESS, else the cluster environment).",
        )
        self.num_processes = flags.DEFINE_integer(
            "num_processes",
            None,
            "Number of processes in the job "
            "(default: $JAX_NUM_PROCESSES, else the cluster environment).",
        )
        self.process_id = flags.DEFINE_integer(
            "process_id",
            None,
            "This process's id in [0, num_processes) "
            "(default: $JAX_PROCESS_ID, else the cluster environment).",
        )
        self.timeout_s = flags.DEFINE_integer(
            "coordinator_timeout_s",
            COORDINATOR_TIMEOUT_S,
            "Seconds to wait for the coordinator and every process to "
            "join; then the start-up fails.",
            lower_bound=1,
        )

    def start(self, env: Mapping[str, str] | None = None) -> bool:
        """`start_multihost` with these flags; bad values are one line."""
        env = os.environ if env is None else env
        with one_line_errors():
            cluster = multihost.resolve_cluster(
                self.coordinator_address.value,
                self.num_processes.value,
                self.process_id.value,
                env,
            )
        return start_multihost(
            self.mode.value,
            env,
            cluster=cluster,
            timeout_s=self.timeout_s.value,
        )


def start_jax(
    config: ml_collections.ConfigDict, multihost_flags: MultihostFlags
) -> None:
    """What must precede JAX's first backend: deterministic XLA flags
    (config.train.deterministic), then the multi-host start-up."""
    determinism.apply(config.train.deterministic)
    multihost_flags.start()
