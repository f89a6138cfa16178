"""The training loop end to end on a tiny shapes set: logs, resume, audit."""

import functools
import json
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from tests.helpers import requires

# The loop reads tf.data batches, evaluates with pycocotools and logs with
# clu: skipped where they are not installed.
requires.module_or_skip(*requires.TRAIN_LOOP)

from detector import config as config_lib
from detector.data import eval_split, orientation_schedule
from detector.distributed import determinism, sharding
from detector.engine import train_lib, train_metrics, train_programs, train_step
from detector.evaluation import curves, eval_lib
from detector.imaging import canvases
from detector.inference import programs as programs_lib
from detector.launch import cli, validate
from detector.state import checkpoint, optimizer
from detector.state import train_state as state_lib
from ops import host_audit
from tests.detector.helpers import tiny_config
from tests.helpers import (
    checkpoint_faults,
    groups,
    launch_hooks,
    mixed_orientations,
)

pytestmark = groups.TINY_SHAPES_TRAINING

METRIC_KEYS = {
    "step",
    "rpn_cls",
    "rpn_box",
    "cls",
    "box",
    "mask",
    "total",
    "learning_rate",
    "grad_norm",
    "step_time_ms",
    "step_wall_ms",
    "data_wait_ms",
    "host_ms",
    "images_per_sec",
    "nms_backend",
    "host_roundtrips_per_step",
    "deterministic",
}


@pytest.fixture(scope="module")
def shapes_config(tmp_path_factory):
    """The tiny model on a 16-image shapes set, 4 steps of batch 2."""
    config = tiny_config("while_loop")
    data = config.data
    data.source = "shapes"
    data.root = str(tmp_path_factory.mktemp("shapes"))
    data.train_split, data.eval_split = "train", "val"
    data.max_instances = 8
    data.shapes.num_train, data.shapes.num_val = 16, 4
    data.scale_jitter = (0.9, 1.1)
    train = config.train
    train.batch_size, train.num_steps = 2, 4
    train.optimizer, train.learning_rate = "adamw", 1e-3
    # A schedule that does not depend on num_steps, so a run told to stop
    # at step 2 is the same program as one that goes on.
    train.schedule, train.step_boundaries, train.warmup_steps = "step", (), 1
    train.log_every = train.checkpoint_every = 2
    config.eval.batch_size = 2
    config.eval.num_visualized = 2
    return config


def _with(config, **overrides):
    config = config.copy_and_resolve_references()
    for key, value in overrides.items():
        node = config
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        node[leaf] = value
    return config


def _params_at(workdir, step):
    restored = ocp.StandardCheckpointer().restore(
        workdir / "checkpoints" / str(step) / "default"
    )
    return restored["params"], restored["opt_state"]


@pytest.fixture(scope="module")
def resumed_and_straight(shapes_config, tmp_path_factory):
    """One run stopped at step 2 and resumed to 4; one run straight to 4."""
    resumed = tmp_path_factory.mktemp("resumed")
    train_lib.train_and_evaluate(
        _with(shapes_config, **{"train.num_steps": 2}),
        resumed,
        hooks=launch_hooks.TRAIN_PY,
        evaluate=False,
    )
    train_lib.train_and_evaluate(
        shapes_config, resumed, hooks=launch_hooks.TRAIN_PY, evaluate=False
    )
    straight = tmp_path_factory.mktemp("straight")
    train_lib.train_and_evaluate(
        shapes_config, straight, hooks=launch_hooks.TRAIN_PY, evaluate=False
    )
    return resumed, straight


def test_resume_continues_exactly_where_the_run_stopped(resumed_and_straight):
    resumed, straight = resumed_and_straight
    for got, want in zip(
        _params_at(resumed, 4), _params_at(straight, 4), strict=True
    ):
        jax.tree.map(np.testing.assert_array_equal, got, want)


def test_a_resume_restores_into_shapes_without_building_a_fresh_model(
    resumed_and_straight, shapes_config, monkeypatch
):
    resumed, _ = resumed_and_straight

    def no_fresh_model(*args):
        raise AssertionError("the model was initialised")

    monkeypatch.setattr(state_lib, "create_model", no_fresh_model)
    assert _restore(shapes_config, resumed) == 4


def test_metrics_lines_and_config_json(resumed_and_straight, shapes_config):
    resumed, _ = resumed_and_straight
    lines = [
        json.loads(line)
        for line in (resumed / "metrics.jsonl").read_text().splitlines()
    ]
    assert [line["step"] for line in lines] == [2, 4]
    for line in lines:
        assert set(line) == METRIC_KEYS
        assert line["nms_backend"] == "while_loop"
        assert line["host_roundtrips_per_step"] == 0
        # What was in effect: tests/conftest.py turns deterministic GPU ops
        # on for the whole session, while the config keeps the default.
        assert line["deterministic"] is determinism.enabled() is True
        assert line["step_time_ms"] > 0 and np.isfinite(line["total"])
        assert 0 <= line["data_wait_ms"] < 60e3
        assert 0 <= line["host_ms"] < line["step_wall_ms"]
        assert line["images_per_sec"] == pytest.approx(
            shapes_config.train.batch_size / line["step_wall_ms"] * 1e3
        )
    saved = config_lib.load_json(resumed / "config.json")
    assert saved.train.deterministic is False
    assert saved.model.fpn_channels == shapes_config.model.fpn_channels
    assert tuple(saved.data.image_size) == tuple(shapes_config.data.image_size)
    # The end of training draws curves.png from those lines.
    png = resumed / curves.FILE_NAME
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = curves.series(resumed, "eval_val")
    assert drawn["total"] == ([2, 4], [line["total"] for line in lines])
    assert drawn["learning_rate"][1] == [
        line["learning_rate"] for line in lines
    ]


def test_checkpoint_from_another_config_is_one_clear_error(
    resumed_and_straight, shapes_config
):
    _, straight = resumed_and_straight
    saved = (straight / "config.json").read_text()
    other = _with(shapes_config, **{"model.fpn_channels": 8})
    with pytest.raises(
        ValueError,
        match=r"checkpoint .*/4 holds 'params/.*' "
        r"with shape .* but this config needs .*: written by "
        r"a different config; this config differs from "
        rf"{re.escape(str(straight))}/config.json in 1 field\(s\): "
        r"model.fpn_channels \d+ -> 8$",
    ):
        train_lib.train_and_evaluate(
            other, straight, hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    # The failed run left the workdir's config (what eval.py reads) alone.
    assert (straight / "config.json").read_text() == saved


def test_a_finished_workdir_is_reported_complete_not_evaluated_again(
    resumed_and_straight, shapes_config, monkeypatch
):
    _, straight = resumed_and_straight
    origin = eval_lib.data_origin(shapes_config.data)
    saved = {"split": "val", **origin, "bbox": {}}
    (straight / "eval_val.json").write_text(json.dumps(saved))

    def never(*args, **kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr(eval_lib, "compile_predict", never)
    monkeypatch.setattr(eval_lib, "evaluate", never)
    results = train_lib.train_and_evaluate(
        shapes_config, straight, hooks=launch_hooks.TRAIN_PY
    )
    assert results == {launch_hooks.TRAIN_PY.complete_key: 4, **saved}
    (straight / "eval_val.json").unlink()


def test_eval_of_checkpoint_audits_both_nms_sites(
    resumed_and_straight, shapes_config, caplog
):
    _, straight = resumed_and_straight
    config = shapes_config.copy_and_resolve_references()
    cli.set_nms_backend(config, "cpu")
    with caplog.at_level("INFO"):
        summary = eval_lib.evaluate_checkpoint(config, straight)
    assert summary["host_roundtrips_per_predict"] == 2
    # What the silent part of an evaluation does is said before it.
    assert (
        "Evaluating step 4 on val: predicting 4 images (2 batches), then "
        "COCOeval" in caplog.text
    )
    assert "rpn/nms/pure_callback" in caplog.text
    assert "detection/nms/pure_callback" in caplog.text
    written = json.loads((straight / "eval_val_nms-cpu.json").read_text())
    assert written["images"] == 4 and written["nms_backend"] == "cpu"
    assert written["step"] == 4
    assert written["checkpoint"] == str(straight / "checkpoints" / "4")
    assert (written["source"], written["root"]) == (
        config.data.source,
        config.data.root,
    )
    for task in ("bbox", "segm"):
        assert set(written[task]) == set(eval_lib.METRIC_NAMES)
    assert written["predict_latency_ms_per_image"] > 0
    assert (straight / "eval_val_nms-cpu.png").stat().st_size > 0
    # The detections file is COCO results: COCOeval of it gives the summary.
    path = eval_lib.detections_path(straight / "eval_val_nms-cpu")
    assert path.name == "eval_val_nms-cpu.detections.json"
    coco = eval_split.eval_split(config).coco
    image_ids = sorted(coco.getImgIds())
    segm = json.loads(path.read_text())
    assert segm and all(
        set(d) == {"image_id", "category_id", "bbox", "score", "segmentation"}
        for d in segm
    )
    boxes = [{k: v for k, v in d.items() if k != "segmentation"} for d in segm]
    for task, results in (("bbox", boxes), ("segm", segm)):
        again, rows = eval_lib.coco_metrics(coco, results, task, image_ids)
        assert again == written[task], task
        assert rows == written["per_category"][task], task


@pytest.mark.slow
def test_strict_device_refuses_host_nms_before_step_one(
    shapes_config, tmp_path
):
    config = shapes_config.copy_and_resolve_references()
    cli.set_nms_backend(config, "cpu")
    (tmp_path / "config.json").write_text("{}")  # an earlier run's config
    with pytest.raises(
        host_audit.HostRoundTripError,
        match=r"train_step is not device-only: host callback "
        r"`pure_callback` at rpn/nms/pure_callback .*"
        r"--nms=pallas",
    ):
        train_lib.train_and_evaluate(
            config,
            tmp_path,
            hooks=launch_hooks.TRAIN_PY,
            strict_device=True,
            evaluate=False,
        )
    assert not (tmp_path / "checkpoints").exists()  # no empty folder left
    assert (tmp_path / "config.json").read_text() == "{}"
    assert not (tmp_path / "metrics.jsonl").exists()


def test_strict_device_audits_predict_before_step_one(shapes_config, tmp_path):
    # The train step stays on the device; only the detections' NMS (run by
    # the evaluations) goes through the host.
    config = _with(shapes_config, **{"model.detection.nms_backend": "cpu"})
    with pytest.raises(
        host_audit.HostRoundTripError,
        match=r"^predict is not device-only: host callback "
        r"`pure_callback` at detection/nms/pure_callback",
    ):
        train_lib.train_and_evaluate(
            config, tmp_path, hooks=launch_hooks.TRAIN_PY, strict_device=True
        )
    assert not (tmp_path / "checkpoints").exists()
    assert not (tmp_path / "config.json").exists()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_guard_stops_planted_transfer_and_closes_cleanly(
    shapes_config, tmp_path, monkeypatch
):
    real_put_batch, calls, closed = sharding.put_batch, [], []

    def put_numpy_after_first(batch, mesh, keys=sharding.MODEL_INPUTS):
        calls.append(len(calls))
        if len(calls) == 1:  # the batch the step is compiled for
            return real_put_batch(batch, mesh, keys)
        return {k: np.asarray(batch[k]) for k in keys}  # implicit transfer

    def recording(cls):
        close = cls.close
        monkeypatch.setattr(
            cls,
            "close",
            lambda self: (closed.append(cls.__name__), close(self)),
        )

    monkeypatch.setattr(sharding, "put_batch", put_numpy_after_first)
    recording(checkpoint.Checkpointer)
    recording(train_metrics.MetricsLog)
    config = _with(
        shapes_config, **{"train.num_steps": 2, "train.checkpoint_every": 1}
    )
    with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
        train_lib.train_and_evaluate(
            config, tmp_path, hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    # Stopped by the guard at step 2, its batch put with RUN_AHEAD more.
    assert len(calls) == 2 + train_lib.RUN_AHEAD
    assert sorted(closed) == ["Checkpointer", "MetricsLog"]
    # Step 1's async save finished before the checkpointer closed.
    assert _params_at(tmp_path, 1)[0]


def test_check_finite_names_the_step():
    train_metrics.MetricsLog.check_finite(3, 1.5)  # finite: no error
    train_metrics.MetricsLog.check_finite(3, 1.5, np.float32(2.0))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(
            FloatingPointError,
            match=rf"total loss is {bad} at step 7; stopping",
        ):
            train_metrics.MetricsLog.check_finite(7, np.float32(bad))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_check_finite_stops_on_gradient_norm_with_finite_loss(bad):
    with pytest.raises(
        FloatingPointError,
        match=rf"gradient norm is {bad} at step 5 \(total loss "
        r"1\.5\); stopping",
    ):
        train_metrics.MetricsLog.check_finite(
            5, np.float32(1.5), np.float32(bad)
        )


def test_check_finite_stops_on_non_finite_weights():
    train_metrics.MetricsLog.check_finite(4, 1.5, 2.0, np.bool_(True))
    with pytest.raises(
        FloatingPointError,
        match=r"the update of step 4 made weights non-finite "
        r"\(total loss 1\.5\); stopping",
    ):
        train_metrics.MetricsLog.check_finite(4, 1.5, 2.0, np.bool_(False))


@pytest.mark.slow
def test_nan_loss_stops_the_run_with_its_step(shapes_config, tmp_path):
    config = _with(
        shapes_config,
        **{
            "train.learning_rate": 1e30,
            "train.optimizer": "sgd",
            "train.schedule": "step",
            "train.step_boundaries": (),
        },
    )
    with pytest.raises(
        FloatingPointError,
        match=r"((total loss|gradient norm) is (nan|inf) at "
        r"step|the update of step) [1-4]\b",
    ):
        train_lib.train_and_evaluate(
            config, tmp_path, hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    # Whatever was checkpointed before the stop (maybe nothing, and then no
    # checkpoints folder) holds finite weights.
    for step_dir in (tmp_path / "checkpoints").glob("*"):
        if step_dir.name.isdigit():
            params, _ = _params_at(tmp_path, int(step_dir.name))
            assert bool(train_step.all_finite(params))


@functools.partial(jax.jit, static_argnums=2)
def _nan_at(total: jax.Array, step: jax.Array, bad_step: int) -> jax.Array:
    return jnp.where(step == bad_step, jnp.nan, total)


def _nan_loss_at(bad_step):
    """TrainPrograms.__call__ whose step `bad_step` reports a NaN total loss
    (its weights stay finite): the guard must stop the run on it. The train
    step itself is the module's other runs' program (a cache hit); a small
    program of its own sets the NaN, on the device."""
    call = train_programs.TrainPrograms.__call__

    def poisoned(self, state, batch, key):
        state, metrics = call(self, state, batch, key)
        total = _nan_at(metrics["total"], state.step, bad_step)
        return state, {**metrics, "total": total}

    return poisoned


@pytest.mark.parametrize(
    "bad_step, saved",
    [
        (3, "checkpoint 2, saved before it, is intact"),  # between two
        pytest.param(  # on a checkpoint step
            2, "no checkpoint was saved before it", marks=pytest.mark.slow
        ),
    ],
)
def test_a_nan_at_a_chosen_step_is_named_and_never_checkpointed(
    shapes_config, tmp_path, monkeypatch, bad_step, saved
):
    monkeypatch.setattr(
        train_programs.TrainPrograms, "__call__", _nan_loss_at(bad_step)
    )
    # No log step before the end: the checkpoint saves alone must check.
    config = _with(shapes_config, **{"train.log_every": 4})
    with pytest.raises(
        FloatingPointError,
        match=rf"^total loss is nan at step {bad_step}; stopping; {saved}$",
    ):
        train_lib.train_and_evaluate(
            config, tmp_path, hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    kept = sorted(
        int(p.name)
        for p in (tmp_path / "checkpoints").glob("*")
        if p.name.isdigit()
    )
    assert kept == [s for s in (2, 4) if s < bad_step]
    assert not (tmp_path / "metrics.jsonl").read_text()


def test_unwritable_workdir_is_one_clear_error(shapes_config, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(
        ValueError,
        match=r"--workdir=.*/file/run: not "
        r"writable",
    ):
        train_lib.train_and_evaluate(
            shapes_config, blocker / "run", hooks=launch_hooks.TRAIN_PY
        )


def test_check_finite_names_the_intact_checkpoint_or_none():
    with pytest.raises(
        FloatingPointError,
        match=r"stopping; no checkpoint "
        r"was saved before it$",
    ):
        train_metrics.MetricsLog.check_finite(
            3, float("nan"), last_checkpoint=None
        )
    with pytest.raises(
        FloatingPointError,
        match=r"stopping; checkpoint 2, "
        r"saved before it, is intact$",
    ):
        train_metrics.MetricsLog.check_finite(
            3, 1.0, 1.0, False, last_checkpoint=2
        )


def _copy_run(source, tmp_path):
    """A copy of a trained workdir, to damage (the source stays intact)."""
    return shutil.copytree(source, tmp_path / "run")


def _restore(config, run):
    """(restored step, checkpoint log messages) of restore_or_init."""
    ckpt = checkpoint.Checkpointer(run / "checkpoints", max_to_keep=3)
    tx, _ = optimizer.make_optimizer(config)
    try:
        _, state = state_lib.restore_or_init(
            config, sharding.make_mesh(), ckpt, tx
        )
    finally:
        ckpt.close()
    return int(state.step)


# fault -> (damaged step, the step restored instead, the logged reason)
_FAULT_CASES = {
    "random_bytes": (
        4,
        2,
        (
            r"(\d+ of \d+ arrays differ from their "
            r"checksums at save time, first '.*'|its data "
            r"is unreadable \(.*\))"
        ),
    ),
    "changed_value": (
        4,
        2,
        (
            r"1 of \d+ arrays differ from their "
            r"checksums at save time, first '.*'"
        ),
    ),
    "no_metadata": (4, 2, r"default/_METADATA is missing"),
    "truncated_data": (4, 2, r"its data is unreadable \(.*\)"),
    "empty_step": (6, 4, r"the step folder is empty"),
}


def test_fault_cases_cover_every_fault():
    assert set(_FAULT_CASES) == set(checkpoint_faults.FAULTS)


@pytest.mark.parametrize("fault", sorted(_FAULT_CASES))
def test_damaged_checkpoint_is_one_line_and_the_previous_is_restored(
    fault, resumed_and_straight, shapes_config, tmp_path, caplog, capfd
):
    damaged, fallback, reason = _FAULT_CASES[fault]
    run = _copy_run(resumed_and_straight[1], tmp_path)
    checkpoint_faults.FAULTS[fault](run / "checkpoints", damaged)
    capfd.readouterr()
    with caplog.at_level("INFO"):
        assert _restore(shapes_config, run) == fallback
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.levelname in ("WARNING", "ERROR")
    ]
    assert len(lines) == 1, lines
    assert re.fullmatch(
        rf"checkpoint {run}/checkpoints/{damaged} is damaged: {reason}; "
        rf"moved to {damaged}\.damaged; falling back to the previous "
        r"checkpoint",
        lines[0],
    ), lines[0]
    assert "Traceback" not in capfd.readouterr().err
    # Moved aside: the next run neither resumes from it nor saves over it.
    assert (run / "checkpoints" / f"{damaged}.damaged").is_dir()
    assert not (run / "checkpoints" / str(damaged)).exists()


def test_no_intact_checkpoint_is_one_clear_error(
    resumed_and_straight, shapes_config, tmp_path
):
    run = _copy_run(resumed_and_straight[1], tmp_path)
    checkpoint_faults.remove_metadata(run / "checkpoints", 4)
    checkpoint_faults.truncate_data_file(run / "checkpoints", 2)
    with pytest.raises(
        ValueError,
        match=rf"^{run}/checkpoints: no intact "
        r"checkpoint; damaged: 4 \(default/_METADATA is "
        r"missing\); 2 \(its data is unreadable",
    ):
        _restore(shapes_config, run)


def test_training_past_a_damaged_checkpoint_resumes_exactly(
    resumed_and_straight, shapes_config, tmp_path
):
    _, straight = resumed_and_straight
    run = _copy_run(straight, tmp_path)
    checkpoint_faults.change_one_value(run / "checkpoints", 4)
    train_lib.train_and_evaluate(
        shapes_config, run, hooks=launch_hooks.TRAIN_PY, evaluate=False
    )
    # Resumed from step 2 and re-ran steps 3 and 4 exactly.
    for got, want in zip(
        _params_at(run, 4), _params_at(straight, 4), strict=True
    ):
        jax.tree.map(np.testing.assert_array_equal, got, want)
    steps = [
        json.loads(line)["step"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [2, 4]  # step 4's earlier line was dropped, not repeated
    assert (run / "checkpoints" / "4.damaged").is_dir()


def test_eval_skips_a_damaged_checkpoint_and_leaves_it(
    resumed_and_straight, shapes_config, tmp_path, caplog
):
    run = _copy_run(resumed_and_straight[1], tmp_path)
    checkpoint_faults.remove_metadata(run / "checkpoints", 4)
    with caplog.at_level("INFO"):
        eval_lib.evaluate_checkpoint(shapes_config, run, split="val[:2]")
    assert f"{run}/checkpoints/4 is damaged" in caplog.text
    # eval only reads: it restores, it does not resume.
    assert f"Restored {run}/checkpoints/2 (step 2)" in caplog.text
    assert "Resumed from" not in caplog.text
    assert (run / "checkpoints" / "4").is_dir()


def test_eval_of_other_data_never_replaces_the_runs_result(
    resumed_and_straight, shapes_config, tmp_path
):
    run = _copy_run(resumed_and_straight[1], tmp_path)
    (run / "config.json").write_text(shapes_config.to_json())
    own = {"split": "val[:2]", **eval_lib.data_origin(shapes_config.data)}
    own_file = run / f"eval_{eval_lib.split_slug('val[:2]')}.json"
    own_file.write_text(json.dumps(own))
    other = shapes_config.copy_and_resolve_references()
    other.data.root = str(tmp_path / "copy" / "shapes2")
    shutil.copytree(shapes_config.data.root, other.data.root)
    result = eval_lib.evaluate_checkpoint(other, run, split="val[:2]")
    assert json.loads(own_file.read_text()) == own  # untouched
    written = run / f"eval_shapes_shapes2_{eval_lib.split_slug('val[:2]')}.json"
    assert json.loads(written.read_text()) == result
    assert (result["root"], result["step"]) == (other.data.root, 4)


def test_content_checksums_see_any_changed_element():
    tree = {
        "f32": jnp.linspace(-1, 1, 1000),
        "bf16": jnp.ones((7, 3), jnp.bfloat16),
        "i32": jnp.arange(5),
        "flag": jnp.array([True, False]),
    }
    sums = checkpoint.content_checksums(tree)
    assert sums == checkpoint.content_checksums(jax.tree.map(jnp.copy, tree))
    assert all(len(v) == 16 for v in sums.values())
    one_ulp_up = np.nextafter(np.float32(1), np.float32(2))
    changed = {
        "f32": tree["f32"].at[999].set(one_ulp_up),
        "bf16": tree["bf16"].at[6, 2].set(-1),
        "i32": tree["i32"].at[0].set(-1),
        "flag": tree["flag"].at[1].set(True),
    }
    for name, value in changed.items():
        other = checkpoint.content_checksums({**tree, name: value})
        assert [k for k in sums if sums[k] != other[k]] == [name]
    # Swapping two elements changes the position-weighted sums too.
    swapped = tree["i32"].at[jnp.array([0, 1])].set(jnp.array([1, 0]))
    assert (
        checkpoint.content_checksums({**tree, "i32": swapped})["i32"]
        != (sums["i32"])
    )


def test_resume_drops_metrics_lines_past_the_restored_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": s} for s in (2, 4, 6)] + [{"step": 4, "eval": True}]
    path.write_text(
        "".join(json.dumps(x) + "\n" for x in lines) + '{"step": 8, "tot'
    )  # cut short by a kill
    train_metrics.drop_lines_after(path, 4)
    assert [json.loads(x) for x in path.read_text().splitlines()] == [
        {"step": 2},
        {"step": 4},
        {"step": 4, "eval": True},
    ]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


@pytest.mark.parametrize(
    "key,value,message",
    [
        (
            "train.batch_size",
            0,
            r"config.train.batch_size=0: must be in \[1, 4096\]",
        ),
        (
            "train.batch_size",
            -2,
            r"config.train.batch_size=-2: must be in \[1, 4096\]",
        ),
        (
            "eval.batch_size",
            0,
            r"config.eval.batch_size=0: must be in \[1, 4096\]",
        ),
        (
            "eval.batch_size",
            -1,
            r"config.eval.batch_size=-1: must be in \[1, 4096\]",
        ),
        ("train.log_every", 0, r"config.train.log_every=0: must be >= 1"),
        (
            "train.checkpoint_every",
            0,
            r"config.train.checkpoint_every=0: must be >= 1",
        ),
        (
            "train.num_steps",
            -1,
            r"config.train.num_steps=-1: must be in \[1, 2147483647\]",
        ),
        ("eval.max_images", -5, r"config.eval.max_images=-5: must be >= 0"),
        (
            "data.image_size",
            (128,),
            r"config.data.image_size=\(128,\): must be \(height, width\)",
        ),
        (
            "data.image_size",
            (0, 0),
            r"config.data.image_size=\(0, 0\): must be \(height, width\): "
            r"2 integers, each in \[1, 4096\]",
        ),
    ],
)
def test_bad_counts_and_sizes_fail_before_anything_is_written(
    key, value, message, shapes_config, tmp_path
):
    config = _with(shapes_config, **{key: value})
    with pytest.raises(ValueError, match=rf"^{message}"):
        _start(config, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def _start(config, workdir):
    """A run started as train.py starts it: validated, then trained."""
    validate.validate(config)
    return train_lib.train_and_evaluate(
        config, workdir, hooks=launch_hooks.TRAIN_PY
    )


def test_failed_start_leaves_no_new_workdir(shapes_config, tmp_path):
    config = _with(
        shapes_config,
        **{"data.source": "coco_json", "data.root": str(tmp_path / "none")},
    )
    with pytest.raises(
        FileNotFoundError, match="no such folder; a COCO folder holds"
    ):
        train_lib.train_and_evaluate(
            config, tmp_path / "new" / "run", hooks=launch_hooks.TRAIN_PY
        )
    assert not (tmp_path / "new").exists()


def test_eval_rejects_empty_split_and_negative_max_images(
    shapes_config, tmp_path
):
    with pytest.raises(ValueError, match=r"^--split='': empty"):
        eval_lib.evaluate_checkpoint(shapes_config, tmp_path, split="")
    with pytest.raises(ValueError, match=r"^--max_images=-5: must be >= 0"):
        eval_lib.evaluate_checkpoint(shapes_config, tmp_path, max_images=-5)
    assert not any(tmp_path.iterdir())


def test_eval_file_names_encode_the_split_exactly(tmp_path):
    assert eval_lib.split_slug("val") == "val"
    assert eval_lib.split_slug("val2017") == "val2017"
    head, tail = eval_lib.split_slug("val[:3]"), eval_lib.split_slug("val[-3:]")
    assert head.startswith("val_3-") and tail.startswith("val_3-")
    assert head != tail
    assert re.fullmatch(
        r"val_10%-[0-9a-f]{8}", eval_lib.split_slug("val[:10%]")
    )
    # An existing result of another split is never overwritten.
    stem = eval_lib.result_stem(tmp_path, "val[:3]")
    stem.with_suffix(".json").write_text(json.dumps({"split": "val[:3]"}))
    assert eval_lib.result_stem(tmp_path, "val[:3]") == stem  # same split
    stem.with_suffix(".json").write_text(json.dumps({"split": "val[0:3]"}))
    with pytest.raises(
        ValueError,
        match=r"eval_val_3-[0-9a-f]{8}\.json: "
        r"holds the result of split 'val\[0:3\]', not "
        r"'val\[:3\]'",
    ):
        eval_lib.result_stem(tmp_path, "val[:3]")


def test_a_damaged_eval_result_is_overwritten_with_a_log_line(tmp_path, caplog):
    stem = eval_lib.result_stem(tmp_path, "val")
    stem.with_suffix(".json").write_text('{"split": "va')  # cut short
    with caplog.at_level("WARNING"):
        assert eval_lib.result_stem(tmp_path, "val") == stem
    warned = [r.getMessage() for r in caplog.records]
    assert any(
        "eval_val.json holds no readable eval result" in m
        and "it will be overwritten" in m
        for m in warned
    ), warned


def test_another_splits_eval_result_fails_before_step_one(
    shapes_config, tmp_path
):
    (tmp_path / "eval_val.json").write_text(json.dumps({"split": "other"}))
    with pytest.raises(
        ValueError, match=r"eval_val\.json: holds the result of split 'other'"
    ):
        train_lib.train_and_evaluate(
            shapes_config, tmp_path, hooks=launch_hooks.TRAIN_PY
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_val.json"]


def test_each_start_keeps_its_config_and_a_resume_past_the_end_fails(
    resumed_and_straight, shapes_config, tmp_path
):
    resumed, _ = resumed_and_straight
    # The first leg started at 0 with num_steps 2, the second at step 2.
    for name, steps in (("config.0.json", 2), ("config.2.json", 4)):
        saved = json.loads((resumed / name).read_text())
        assert saved["train"]["num_steps"] == steps, name
    assert (resumed / "config.json").read_text() == (
        resumed / "config.2.json"
    ).read_text()
    copy = tmp_path / "copy"
    shutil.copytree(resumed, copy)
    before = sorted(p.name for p in copy.iterdir())
    with pytest.raises(
        ValueError,
        match=r"checkpoints/4: this workdir's checkpoint is beyond "
        r"config\.train\.num_steps=3; set --config\.train\.num_steps=4",
    ):
        train_lib.train_and_evaluate(
            _with(shapes_config, **{"train.num_steps": 3}),
            copy,
            hooks=launch_hooks.TRAIN_PY,
        )
    assert sorted(p.name for p in copy.iterdir()) == before


# Orientation canvases: one train program per canvas.
MIXED_IMAGES = 12  # 8 landscape, 4 portrait


@pytest.fixture(name="grouped_config", scope="module")
def grouped_config_fixture(tmp_path_factory):
    """The tiny model on the mixed folder's two canvases, batch 2, up to
    the first step of the other orientation than step 1's."""
    root = tmp_path_factory.mktemp("mixed")
    mixed_orientations.write(root, "train", MIXED_IMAGES)
    config = tiny_config("while_loop")
    grouped = mixed_orientations.grouped_config(root).data
    for key in (
        "source",
        "root",
        "resize",
        "min_size",
        "max_size",
        "image_size",
        "group_orientations",
    ):
        config.data[key] = grouped[key]
    config.data.train_split = "train"
    train = config.train
    train.batch_size = 2
    train.schedule, train.step_boundaries, train.warmup_steps = "step", (), 1
    schedule = orientation_schedule.OrientationSchedule(
        config.seed, (8, 4), train.batch_size
    )
    kinds = [schedule.orientation(step) for step in range(MIXED_IMAGES)]
    train.num_steps = kinds.index(1 - kinds[0]) + 1
    train.log_every = train.checkpoint_every = train.num_steps
    return config


def _train_without_eval(config, workdir):
    return train_lib.train_and_evaluate(
        config, workdir, hooks=launch_hooks.TRAIN_PY, evaluate=False
    )


@pytest.fixture(name="grouped_runs", scope="module")
def grouped_runs_fixture(grouped_config, tmp_path_factory):
    """A run straight to the end (the programs it compiled and the canvas
    of each step it ran), and one stopped before the step of the other
    orientation and resumed there."""
    compiled, ran = [], []
    compile_audited = host_audit.compile_audited
    call = train_programs.TrainPrograms.__call__

    def compile_spy(*args, program, **kwargs):
        compiled.append((program, len(ran)))
        return compile_audited(*args, program=program, **kwargs)

    def call_spy(self, state, batch, key):
        ran.append(programs_lib.canvas_of(batch["image"]))
        return call(self, state, batch, key)

    straight = tmp_path_factory.mktemp("straight")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host_audit, "compile_audited", compile_spy)
        patch.setattr(train_programs.TrainPrograms, "__call__", call_spy)
        _train_without_eval(grouped_config, straight)
    resumed = tmp_path_factory.mktemp("resumed")
    stopped = grouped_config.copy_and_resolve_references()
    end = grouped_config.train.num_steps
    stopped.train.num_steps = stopped.train.checkpoint_every = end - 1
    _train_without_eval(stopped, resumed)
    _train_without_eval(grouped_config, resumed)
    return compiled, ran, straight, resumed


@pytest.mark.slow
def test_two_canvases_compile_two_programs_and_each_step_runs_its_own(
    grouped_config, grouped_runs
):
    compiled, ran, _, _ = grouped_runs
    placed = canvases.canvases(grouped_config.data)
    schedule = orientation_schedule.OrientationSchedule(
        grouped_config.seed, (8, 4), grouped_config.train.batch_size
    )
    first = placed[schedule.orientation(0)]
    # Both before step 1, the first batch's canvas first.
    assert compiled == [
        (f"train_step on {h}x{w}", 0)
        for h, w in (first, *(c for c in placed if c != first))
    ]
    steps = range(grouped_config.train.num_steps)
    assert ran == [placed[schedule.orientation(s)] for s in steps]
    assert set(ran) == set(placed)


@pytest.mark.slow
def test_a_resume_on_the_other_canvas_continues_exactly(
    grouped_config, grouped_runs
):
    _, _, straight, resumed = grouped_runs
    end = grouped_config.train.num_steps
    for got, want in zip(
        _params_at(resumed, end), _params_at(straight, end), strict=True
    ):
        jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.slow
def test_a_portrait_only_set_compiles_no_landscape_program(
    grouped_config, tmp_path, monkeypatch
):
    """Train and eval: only the canvases the data uses are compiled."""
    root = tmp_path / "portrait"
    for split in ("train", "val"):
        mixed_orientations.write(root, split, 4, portrait_only=True)
    config = grouped_config.copy_and_resolve_references()
    config.data.root, config.data.eval_split = str(root), "val"
    config.train.num_steps = config.train.checkpoint_every = 1
    config.eval.batch_size = 2
    compiled = []
    compile_audited = host_audit.compile_audited

    def compile_spy(jitted, *args, program, **kwargs):
        images = args[1]["image"] if program == "train_step" else args[2]
        compiled.append((program, tuple(images.shape[1:3])))
        return compile_audited(jitted, *args, program=program, **kwargs)

    monkeypatch.setattr(host_audit, "compile_audited", compile_spy)
    workdir = tmp_path / "run"
    train_lib.train_and_evaluate(config, workdir, hooks=launch_hooks.TRAIN_PY)
    portrait = canvases.canvases(config.data)[canvases.PORTRAIT]
    assert compiled == [
        ("predict", portrait),
        ("train_step", portrait),
    ]
    compiled.clear()
    eval_lib.evaluate_checkpoint(config, workdir)
    assert compiled == [("predict", portrait)]


def test_the_compiling_line_counts_the_programs():
    assert re.fullmatch(
        r"Compiling the train step \(2 programs, one per canvas\) and "
        r"predict \(.*\); step 1 follows",
        train_lib._compiling_line(True, 2, 1),
    )
    assert train_lib._compiling_line(False, 1, 1).startswith(
        "Compiling the train step ("
    )
    # A resume names the step it goes on with.
    assert train_lib._compiling_line(True, 1, 848).endswith(
        "; step 848 follows"
    )
    # Programs a run of this config left in the compilation cache.
    assert train_lib._compiling_line(True, 1, 1, cached=True).startswith(
        "Loading the train step and predict from the compilation cache ("
    )


def test_eval_step_evaluates_that_checkpoints_weights(
    resumed_and_straight, shapes_config, tmp_path, monkeypatch
):
    run = _copy_run(resumed_and_straight[1], tmp_path)
    evaluated = []
    real = eval_lib.evaluate

    def evaluate(context, weights, **kwargs):
        evaluated.append(jax.device_get(nnx.to_pure_dict(weights.params)))
        return real(context, weights, **kwargs)

    monkeypatch.setattr(eval_lib, "evaluate", evaluate)
    steps = eval_lib.chosen_steps(run, step=2)
    (result,) = eval_lib.evaluate_checkpoints(
        shapes_config, run, split="val[:2]", steps=steps
    )
    assert (result["step"], result["checkpoint"]) == (
        2,
        str(run / "checkpoints" / "2"),
    )
    stem = f"eval_{eval_lib.split_slug('val[:2]')}_step2"
    assert json.loads((run / f"{stem}.json").read_text()) == result
    line = eval_lib.result_line(run, shapes_config, result, step_named=True)
    assert line.startswith(f"evaluated step 2 ({run}/checkpoints/2)")
    assert f"wrote {run / stem}.json, .png, .detections.json" in line
    # The weights evaluated are step 2's, which differ from step 4's.
    want, later = (_flat(_params_at(run, step)[0]) for step in (2, 4))
    got = _flat(evaluated[0])
    assert got.keys() == want.keys() == later.keys()
    assert any(not np.array_equal(want[k], later[k]) for k in want)
    for name, value in got.items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)


def _flat(tree) -> dict:
    """{'a/b/0': leaf} of nested dicts (int or str keys alike)."""
    return {
        "/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def test_eval_steps_named_or_all_and_a_bad_step_is_one_line(
    resumed_and_straight,
):
    run = resumed_and_straight[1]
    assert eval_lib.chosen_steps(run) == [None]
    assert eval_lib.chosen_steps(run, all_steps=True) == [2, 4]
    assert eval_lib.chosen_steps(run, step=4) == [4]
    with pytest.raises(ValueError) as error:
        eval_lib.chosen_steps(run, step=3)
    assert str(error.value) == (
        f"--step=3: {run}/checkpoints keeps no checkpoint of step 3; kept "
        "steps: 2, 4"
    )
    with pytest.raises(ValueError, match="--step and --all_steps"):
        eval_lib.chosen_steps(run, step=2, all_steps=True)
