"""The training loop: restore or init, compile and audit, then steps, logs,
checkpoints and evaluations (docs/training.md, docs/architecture.md).
"""

import collections
import contextlib
import dataclasses
import functools
import itertools
import os
import pathlib
import time
from collections.abc import Callable, Iterator

import jax
import ml_collections
import optax
from absl import logging
from clu import periodic_actions
from flax import nnx
from jax.sharding import Mesh

import ops
from detector.data import pipeline
from detector.distributed import (
    determinism,
    multihost,
    preemption,
    run_lock,
    sharding,
)
from detector.engine import (
    device_prefetch,
    finite_guard,
    profile_window,
    train_metrics,
    train_programs,
)
from detector.engine import train_step as step_lib
from detector.evaluation import curves, eval_lib
from detector.imaging import canvases as canvases_lib
from detector.inference import detect
from detector.state import checkpoint, optimizer
from detector.state import train_state as state_lib
from detector.utils import compile_cache, files
from ops import host_audit
from ops import nms as nms_lib


def prepare_workdir(workdir: str | pathlib.Path) -> pathlib.Path:
    """Creates the workdir and checks it is writable."""
    path = pathlib.Path(workdir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        # One probe per process: processes sharing the workdir must not
        # remove each other's.
        probe = path / f".write_test.{jax.process_index()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(
            f"--workdir={workdir}: not writable ({e.strerror or e})"
        ) from None
    return path


@dataclasses.dataclass(frozen=True)
class LaunchHooks:
    """What the entry point does inside a run (detector/launch/, passed in
    by train.py: the loop imports nothing of launch/)."""

    # (config, workdir, start step, checkpoints folder), after the restore:
    # a resume logs what changed; a checkpoint past num_steps raises.
    check_resume: Callable[
        [ml_collections.ConfigDict, pathlib.Path, int, pathlib.Path], None
    ]
    # (workdir, config, start step), once the restore and the audits pass.
    save_config: Callable[[pathlib.Path, ml_collections.ConfigDict, int], None]
    # (workdir, its stat at the start), on log steps and before each save
    # (process 0): raises where the workdir was deleted, moved or replaced.
    check_kept: Callable[[pathlib.Path, os.stat_result], None]
    # The result's key, holding the step, for a workdir trained to the end.
    complete_key: str


@dataclasses.dataclass
class RunContext:
    """What the training loop and the evaluations of one run share, made
    once per run: where it runs and writes, its checkpoints, the canvases
    its training batches use and the programs compiled for them, the
    metrics log, and the evaluations' context (None: no evaluations)."""

    config: ml_collections.ConfigDict
    workdir: pathlib.Path
    mesh: Mesh
    ckpt: checkpoint.Checkpointer
    stop: preemption.Watch | None = None  # None: signals are not watched
    canvases: tuple[canvases_lib.Canvas, ...] = ()  # the train programs'
    programs: train_programs.TrainPrograms | None = None
    log: train_metrics.MetricsLog | None = None
    evaluation: eval_lib.EvalContext | None = None
    eval_graphdef: nnx.GraphDef | None = None
    # Raises where the workdir is no longer the run's (LaunchHooks.check_kept).
    check_kept: Callable[[], None] | None = None


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | pathlib.Path,
    *,
    hooks: LaunchHooks,
    strict_device: bool = False,
    evaluate: bool = True,
    stop: preemption.Watch | None = None,
    evaluate_finished: bool = False,
) -> dict:
    """Trains `config` into `workdir`, then evaluates; returns eval results.

    `evaluate=False` skips the evaluations (at the end and every
    eval_every steps) and returns {}. With `stop`, a SIGTERM/SIGINT it
    caught ends the run after the current step with a checkpoint of it:
    raises `preemption.Preempted`. A workdir trained to num_steps returns
    {hooks.complete_key: step, ...its saved evaluation} without evaluating
    again, unless `evaluate_finished`. The caller validates `config` first
    (detector/launch/validate.py, where a run starts).
    """
    multihost.check_same_config(config)
    mesh = sharding.make_mesh()
    sharding.check_divisible("train.batch_size", config.train.batch_size, mesh)
    sharding.check_divisible("eval.batch_size", config.eval.batch_size, mesh)
    created = files.missing_folders(pathlib.Path(workdir) / "checkpoints")
    workdir = prepare_workdir(workdir)
    logging.info(
        "Data parallel over %d %s devices in %d process(es); batch %d per step",
        mesh.size,
        jax.default_backend(),
        jax.process_count(),
        config.train.batch_size,
    )
    try:
        with run_lock.held(workdir):  # one run per workdir
            pipeline.prepare(config)
            tx, schedule = optimizer.make_optimizer(config)
            ckpt = checkpoint.Checkpointer(
                workdir / "checkpoints",
                max_to_keep=config.train.keep_checkpoints,
            )
            run = RunContext(
                config,
                workdir,
                mesh,
                ckpt,
                stop=stop,
                check_kept=functools.partial(
                    hooks.check_kept, workdir, os.stat(workdir)
                ),
            )
            try:
                return _train(
                    run,
                    tx,
                    schedule,
                    hooks,
                    strict=strict_device,
                    evaluate=evaluate,
                    evaluate_finished=evaluate_finished,
                )
            finally:
                ckpt.close()  # after in-flight saves, also when a step failed
    except BaseException:
        if jax.process_index() == 0:  # a failed start leaves no empty folders
            files.remove_empty(created)
        raise


def _train(
    run: RunContext,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    hooks: LaunchHooks,
    *,
    strict: bool,
    evaluate: bool,
    evaluate_finished: bool = False,
) -> dict:
    """Restores, compiles and audits, then trains and evaluates."""
    config, workdir, mesh, ckpt = run.config, run.workdir, run.mesh, run.ckpt
    if evaluate:  # a result file it may not overwrite fails before step 1
        eval_lib.result_stem(workdir, config.data.eval_split)
    # The data first: a missing dataset fails before the model is built.
    logging.info(  # else the console is silent through these seconds
        "Reading the data and building the model (about 30 s on a 2-core "
        "CPU); then the compile"
    )
    latest = ckpt.latest_step() or 0
    batches = pipeline.train_batches(config, start_step=latest)
    graphdef, state = state_lib.restore_or_init(config, mesh, ckpt, tx)
    start_step = int(jax.device_get(state.step))
    hooks.check_resume(config, workdir, start_step, ckpt.directory)
    if start_step == config.train.num_steps and not evaluate_finished:
        return {hooks.complete_key: start_step, **_saved_eval(workdir, config)}
    if start_step != latest:  # damaged checkpoints were skipped
        batches = pipeline.train_batches(config, start_step=start_step)
    run.canvases = batches.canvases
    run.eval_graphdef = state_lib.eval_graphdef(
        graphdef, state.params, state.rest
    )
    if evaluate:  # the split read once for every evaluation
        run.evaluation = eval_lib.eval_context(
            config, mesh, workdir, strict=strict
        )
    # Whether a run of this config on this code left its programs in the
    # compilation cache, said before the compile (then recorded for the next).
    index = compile_cache.ProgramIndex(
        multihost.config_hash(config), str(evaluate), _source_digest()
    )
    logging.info(
        _compiling_line(
            evaluate, len(run.canvases), start_step + 1, cached=index.cached
        )
    )
    hits, started = compile_cache.hits(), time.perf_counter()
    with index.watching():
        if run.evaluation:  # predict first: it compiles faster, so a strict
            run.evaluation.compiled(_weights(run, state))  # run fails sooner
        key = sharding.replicate(jax.random.key(config.seed), mesh)
        batch = sharding.put_batch(next(batches), mesh)
        run.programs, findings = train_programs.compile_per_canvas(
            step_lib.make_train_step(graphdef, tx, schedule, mesh),
            state,
            batch,
            key,
            run.canvases,
            strict=strict,
            advice=nms_lib.host_advice,
        )
    logging.info(
        "%s", _compiled_line(compile_cache.hits() - hits, started, evaluate)
    )
    index.record()
    # The restore and the audits passed: config.json, config.<step>.json.
    hooks.save_config(workdir, config, start_step)
    run.log = train_metrics.MetricsLog(
        workdir,
        backend=nms_lib.backend_name(
            config.model.rpn.nms_backend, config.model.detection.nms_backend
        ),
        host_roundtrips=len(findings),
        images_per_step=config.train.batch_size,
        deterministic=determinism.enabled(),
        resume_step=start_step,
        num_steps=config.train.num_steps,
    )
    try:
        state = _loop(run, state, batch, batches, key, start_step)
        ckpt.wait()
        results = (
            _evaluate(run, state, config.train.num_steps) if evaluate else {}
        )
    finally:
        run.log.close()
    if jax.process_index() == 0:  # after metrics.jsonl's last line
        curves.draw(
            workdir, eval_lib.result_stem(workdir, config.data.eval_split).name
        )
    return results


# How long the first compile of the train step (and predict) takes, by
# platform: configs/shapes.py's, and the R50 configs' on an accelerator.
COMPILE_TIMES = {
    "cpu": "about 1-3 minutes on a 2-core CPU, less on more cores",
    "gpu": "seconds to a minute on a GPU",
    "tpu": "seconds to a minute on a TPU",
}


@functools.cache
def _source_digest() -> str:
    """The digest of the code that builds the programs (detector/, ops/)."""
    return compile_cache.source_digest(
        pathlib.Path(__file__).resolve().parents[1],
        pathlib.Path(ops.__file__).resolve().parent,
    )


def _compiling_line(
    evaluate: bool,
    num_canvases: int,
    first_step: int,
    *,
    cached: bool = False,
) -> str:
    """The line logged before the first compile: what, how long (`cached`:
    loaded from the compilation cache), and the step that follows (past a
    resume's checkpoint)."""
    programs = "the train step"
    if num_canvases > 1:
        programs += f" ({num_canvases} programs, one per canvas)"
    if evaluate:
        programs += " and predict"
    if cached:
        return (
            f"Loading {programs} from the compilation cache "
            f"({compile_cache.folder()}), where a run of this config left "
            f"them (seconds, not a compile); step {first_step} follows"
        )
    platform = jax.default_backend()
    took = COMPILE_TIMES.get(platform, f"minutes on {platform}")
    return f"Compiling {programs} ({took}); step {first_step} follows"


def _compiled_line(loaded: int, started: float, evaluate: bool) -> str:
    """The line logged after the compile: how long it took, and whether the
    programs came from the compilation cache (detector/utils/compile_cache)."""
    what = "The train step and predict" if evaluate else "The train step"
    seconds = time.perf_counter() - started
    folder = jax.config.jax_compilation_cache_dir
    if loaded:
        return (
            f"{what}: {loaded} program(s) loaded from the compilation cache "
            f"({folder}) in {seconds:.1f} s"
        )
    if folder and jax.config.jax_enable_compilation_cache:
        return (
            f"{what}: compiled in {seconds:.1f} s, kept in the compilation "
            f"cache ({folder}) for the next run"
        )
    return f"{what}: compiled in {seconds:.1f} s"


def _saved_eval(
    workdir: pathlib.Path, config: ml_collections.ConfigDict
) -> dict:
    """The eval split's saved result of the run's own data in `workdir`,
    or {} where none is readable."""
    return eval_lib.saved_result(workdir, config)


# Steps dispatched ahead of the one the host waits for, and batches put on
# the devices ahead of the step that takes them.
RUN_AHEAD = 2


@dataclasses.dataclass
class _LogStep:
    """A log step dispatched, its metrics line written once the step after
    it is dispatched (the device never idles for the line)."""

    step: int
    metrics: dict[str, jax.Array]
    finite: dict[str, jax.Array]  # the finite guard's record after it
    started: float  # when the device began it: the step before it done


def _loop(
    run: RunContext,
    state: state_lib.TrainState,
    batch: dict[str, jax.Array],
    batches: Iterator[dict],
    key: jax.Array,
    start_step: int,
) -> state_lib.TrainState:
    """Steps start_step + 1 .. num_steps: log, checkpoint, evaluate.

    The host runs up to RUN_AHEAD steps ahead of the device: it waits for
    the device for the step RUN_AHEAD back, for a log step's metrics once
    the step after it is dispatched, and before checkpoints and
    evaluations; the finite guard reads its record at those same points.
    """
    train = run.config.train
    progress = periodic_actions.ReportProgress(
        num_train_steps=train.num_steps,
        writer=run.log.writer,
        every_steps=train.log_every,
    )
    guard = finite_guard.FiniteGuard(run.mesh)
    profile = profile_window.ProfileWindow(
        tuple(train.profile_steps), run.workdir, start_step
    )
    inputs = itertools.chain(
        [batch], device_prefetch.ahead(batches, run.mesh, RUN_AHEAD)
    )
    in_flight = collections.deque()  # a value of each step not waited for
    pending: _LogStep | None = None  # a log step whose line is not written
    done = 0.0  # when the loop last saw every dispatched step finished
    if run.stop is not None:  # from here on a signal saves a step
        run.stop.begin_steps()
    if _stop_agreed(run):  # before step 1
        _save_and_stop(run, state, start_step, guard, saved=True)
    run.log.start_window()
    with host_audit.device_only_transfers(), contextlib.ExitStack() as stack:
        stack.callback(profile.close)
        for step in range(start_step + 1, train.num_steps + 1):
            logged = step % train.log_every == 0 or step == train.num_steps
            saved = (
                step % train.checkpoint_every == 0 or step == train.num_steps
            )
            waited = time.perf_counter()
            batch = next(inputs)
            run.log.add_data_wait(time.perf_counter() - waited)
            _wait(run, in_flight, RUN_AHEAD - 1)
            profile.before(step)
            dispatched = time.perf_counter()
            state, metrics = run.programs(state, batch, key)
            guard.update(metrics, state.step)
            metrics.pop(step_lib.STATE_FINITE)
            profile.after(step, metrics)
            # The log step before, while this one runs.
            done, pending = _write(run, guard, pending, done), None
            if logged:  # timed from the end of the steps before it
                ready = all(x.is_ready() for x in in_flight)
                _wait(run, in_flight, 0)
                started = (
                    max(dispatched, done) if ready else time.perf_counter()
                )
                pending = _LogStep(step, metrics, guard.record, started)
            in_flight.append(metrics["total"])
            if logged or saved:  # a stat: the workdir still the run's
                _check_kept(run)
            run.ckpt.check_saves()  # a failed background save stops here
            progress(step)
            evaluated = (
                run.evaluation is not None
                and train.eval_every
                and step % train.eval_every == 0
                and step < train.num_steps
            )
            # Several processes agree on log and checkpoint steps alone (a
            # collective, which waits for the step); one process: any step.
            stop = _stop_agreed(run, agree=logged or saved)
            if saved or stop or evaluated:  # its line before its checkpoint
                done, pending = _write(run, guard, pending, done), None
            if saved:
                _check_finite(run, guard)  # no NaN reaches a checkpoint
                run.ckpt.save(step, state_lib.to_tree(state))
            if stop:
                _save_and_stop(run, state, step, guard, saved=saved)
            if evaluated:
                _check_finite(run, guard)
                with run.log.paused():  # not in the rates and the ETA
                    _evaluate(run, state, step)
    _check_finite(run, guard)  # the last step is saved: no line pending
    return state


def _write(
    run: RunContext,
    guard: finite_guard.FiniteGuard,
    logged: _LogStep | None,
    done: float,
) -> float:
    """Waits for a log step, checks the steps up to it finite, and writes
    its metrics line; returns when it was seen done (`done` for None)."""
    if logged is None:
        return done
    waited = time.perf_counter()
    jax.block_until_ready(logged.metrics)
    done = time.perf_counter()
    run.log.add_device_wait(done - waited)
    run.log.set_step_time(done - logged.started)
    _check_finite(run, guard, logged.finite)  # before its metrics line
    run.log.write(logged.step, jax.device_get(logged.metrics))
    return done


def _wait(run: RunContext, in_flight: collections.deque, keep: int) -> None:
    """Waits until at most `keep` dispatched steps are unfinished."""
    if len(in_flight) <= keep:
        return
    started = time.perf_counter()
    while len(in_flight) > keep:
        jax.block_until_ready(in_flight.popleft())
    run.log.add_device_wait(time.perf_counter() - started)


def _check_finite(
    run: RunContext,
    guard: finite_guard.FiniteGuard,
    record: dict[str, jax.Array] | None = None,
) -> None:
    """Raises FloatingPointError if a step so far (up to `record`'s, a
    `guard.record` taken earlier) was non-finite, naming it and the newest
    checkpoint (saved before it)."""
    started = time.perf_counter()
    guard.check(last_checkpoint=run.ckpt.latest_step(), record=record)
    run.log.add_device_wait(time.perf_counter() - started)


def _check_kept(run: RunContext) -> None:
    """Raises ValueError where the workdir was deleted, moved or replaced
    (process 0, which wrote its config.json; peers then stop as for any
    lost process)."""
    if run.check_kept is not None and jax.process_index() == 0:
        run.check_kept()


def _stop_agreed(run: RunContext, *, agree: bool = True) -> bool:
    """Whether a stop was requested (`agree`: every process asks at this
    step, `preemption.Watch.stop_requested`)."""
    return run.stop is not None and run.stop.stop_requested(agree=agree)


def _save_and_stop(
    run: RunContext,
    state: state_lib.TrainState,
    step: int,
    guard: finite_guard.FiniteGuard,
    *,
    saved: bool,
) -> None:
    """Checkpoints `step` (unless `saved`), waits for the save and raises
    preemption.Preempted."""
    if not saved:
        _check_finite(run, guard)
        _check_kept(run)
        run.ckpt.save(step, state_lib.to_tree(state))
    run.ckpt.wait()
    raise preemption.Preempted(step, run.stop.signum)


def _weights(
    run: RunContext, state: state_lib.TrainState, step: int | None = None
) -> detect.Weights:
    """The weights of `state` at `step`, naming its checkpoint where one is
    saved at that step."""
    train = run.config.train
    saved = step is not None and (
        step % train.checkpoint_every == 0 or step == train.num_steps
    )
    return detect.Weights(
        run.eval_graphdef,
        state.params,
        state.rest,
        step,
        str(run.ckpt.directory / str(step)) if saved else None,
    )


def _evaluate(run: RunContext, state: state_lib.TrainState, step: int) -> dict:
    results = eval_lib.evaluate(run.evaluation, _weights(run, state, step))
    run.log.write_eval(step, results)
    return results
