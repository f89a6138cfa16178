"""detector/state/warm_start.py: fine-tuning from another run's checkpoint.

A 3-class shapes model trains 3 steps; a 2-class relabelled copy of the
same data (circles vs polygons) then fine-tunes from its checkpoint with
the stem and stage 1 frozen.
"""

import json
import logging
import re
import shutil

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.helpers import requires

# Fine-tuning runs the training loop: tf.data, pycocotools, clu.
requires.module_or_skip(*requires.TRAIN_LOOP)

from detector.engine import train_lib
from detector.modeling import model as model_lib
from detector.state import warm_start
from tests.detector.helpers import tiny_config
from tests.helpers import checkpoint_faults, groups, launch_hooks

pytestmark = groups.WARM_START

FROZEN = ("backbone/stem/", "backbone/stages/0/")


def _source_config(root):
    config = tiny_config("while_loop")
    data = config.data
    data.source, data.root = "shapes", str(root)
    data.train_split, data.eval_split = "train", "val"
    data.max_instances = 8
    data.shapes.num_train, data.shapes.num_val = 16, 4
    train = config.train
    train.batch_size, train.num_steps = 2, 3
    train.optimizer, train.learning_rate = "adamw", 1e-3
    train.schedule, train.step_boundaries, train.warmup_steps = "step", (), 1
    train.log_every = train.checkpoint_every = 3
    return config


def _relabel(source_root, root):
    """A copy of the shapes data with 2 classes: circle, polygon."""
    shutil.copytree(source_root, root)
    for path in (root / "annotations").glob("instances_*.json"):
        coco = json.loads(path.read_text())
        coco["categories"] = [
            {"id": 1, "name": "circle"},
            {"id": 2, "name": "polygon"},
        ]
        for annotation in coco["annotations"]:
            annotation["category_id"] = min(annotation["category_id"], 2)
        path.write_text(json.dumps(coco))


def _fine_tune_config(source_config, root, init):
    config = source_config.copy_and_resolve_references()
    config.data.source, config.data.root = "coco_json", str(root)
    config.data.num_classes = 2
    config.model.init_checkpoint = str(init)
    config.model.freeze_at = 2
    config.train.num_steps = config.train.log_every = 2
    config.train.checkpoint_every = 2
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(source workdir, fine-tune workdir, fine-tune config, its log)."""
    base = tmp_path_factory.mktemp("warm_start")
    source_config = _source_config(base / "shapes")
    train_lib.train_and_evaluate(
        source_config,
        base / "source",
        hooks=launch_hooks.TRAIN_PY,
        evaluate=False,
    )
    _relabel(base / "shapes", base / "shapes2")
    config = _fine_tune_config(source_config, base / "shapes2", base / "source")
    records = _Records()
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.addHandler(records)
    absl_logger.setLevel(logging.INFO)
    try:
        train_lib.train_and_evaluate(
            config, base / "tuned", hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    finally:
        absl_logger.removeHandler(records)
        absl_logger.setLevel(level)
    lines = [
        line for line in records.lines if line.startswith("init_checkpoint:")
    ]
    return base / "source", base / "tuned", config, lines


class _Records(logging.Handler):
    """The messages logged through absl while attached."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _checkpoint(workdir, step):
    return ocp.StandardCheckpointer().restore(
        workdir / "checkpoints" / str(step) / "default"
    )


def _names(line, prefix):
    listed = re.fullmatch(rf"{prefix}: (.*)", line).group(1)
    return listed.split(", ")


def test_fine_tune_restores_all_but_the_class_heads(runs):
    source, _, _, lines = runs
    restored, reinitialised = lines[:2]
    params = warm_start.flat(_checkpoint(source, 3)["params"])
    class_heads = sorted(
        n for n in params if n.startswith(model_lib.CLASS_DEPENDENT)
    )
    assert len(class_heads) == 6  # kernel and bias of 3 heads
    assert sorted(
        _names(
            reinitialised,
            r"init_checkpoint: 6 arrays "
            "reinitialised",
        )
    ) == sorted(f"{n} (num_classes 3 -> 2)" for n in class_heads)
    want = sorted(set(params) - set(class_heads))
    assert (
        sorted(
            _names(
                restored,
                rf"init_checkpoint: {len(want)} arrays "
                rf"restored from .*/source/checkpoints/3 \(the step "
                r"and optimizer state start fresh\)",
            )
        )
        == want
    )
    assert len(lines) == 2  # no checkpoint array goes unused


def test_frozen_params_get_no_state_and_no_updates(runs):
    source, tuned, _, _ = runs
    before = warm_start.flat(_checkpoint(source, 3)["params"])
    tree = _checkpoint(tuned, 2)
    after = warm_start.flat(tree["params"])
    frozen = [n for n in after if n.startswith(FROZEN)]
    assert frozen
    for name, value in after.items():
        if name.startswith(FROZEN):  # restored, then never updated
            np.testing.assert_array_equal(value, before[name], name)
        elif name.startswith("backbone/"):  # restored, then trained
            assert not np.array_equal(value, before[name]), name
    state = warm_start.flat(tree["opt_state"])
    moments = [n for n in state if n.endswith("kernel")]
    assert moments and not any(
        f"/{prefix}" in n for n in moments for prefix in FROZEN
    )
    assert any("/backbone/stages/1/" in n for n in moments)
    # The step and the optimizer state started fresh: 2 steps, not 3 + 2.
    assert int(tree["step"]) == 2
    counts = {int(v) for n, v in state.items() if n.endswith("count")}
    assert counts == {2}


def test_fine_tuned_model_has_two_classes_and_finite_losses(runs):
    _, tuned, _, _ = runs
    params = warm_start.flat(_checkpoint(tuned, 2)["params"])
    assert params["roi_heads/box_head/classes/bias"].shape == (
        3,
    )  # 2 + background
    assert params["roi_heads/mask_head/logits/bias"].shape == (2,)
    lines = [
        json.loads(line)
        for line in (tuned / "metrics.jsonl").read_text().splitlines()
    ]
    assert [line["step"] for line in lines] == [2]
    assert np.isfinite(lines[0]["total"]) and lines[0]["mask"] > 0


def test_a_fine_tune_run_resumes_its_own_checkpoint(runs, monkeypatch):
    _, tuned, config, _ = runs
    called = []
    monkeypatch.setattr(
        warm_start,
        "from_checkpoint",
        lambda *args, **kwargs: called.append(args),
    )
    config = config.copy_and_resolve_references()
    config.train.num_steps = 3
    train_lib.train_and_evaluate(
        config, tuned, hooks=launch_hooks.TRAIN_PY, evaluate=False
    )
    assert not called
    assert int(_checkpoint(tuned, 3)["step"]) == 3


@pytest.mark.parametrize(
    "key,match,error",
    [
        (
            "model.init_checkpoint",
            (
                r"^config\.model\.init_checkpoint='.*/"
                r"nowhere': no such file or folder$"
            ),
            FileNotFoundError,
        ),
        (
            "model.backbone_init",
            (
                r"^config\.model\.backbone_init='.*/nowhere': "
                r"no such file; docs/coco.md says where to get it, .*$"
            ),
            FileNotFoundError,
        ),
    ],
)
def test_a_failed_warm_start_writes_nothing(runs, tmp_path, key, match, error):
    _, _, config, _ = runs
    config = config.copy_and_resolve_references()
    config.model.init_checkpoint = ""
    config.model[key.split(".")[1]] = str(tmp_path / "nowhere")
    workdir = tmp_path / "run"
    with pytest.raises(error, match=match):
        train_lib.train_and_evaluate(
            config, workdir, hooks=launch_hooks.TRAIN_PY, evaluate=False
        )
    # A failed start removes the folders it created: nothing is left.
    assert not workdir.exists()


def test_a_folder_without_checkpoints_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ValueError,
        match=r"init_checkpoint='.*/empty': holds "
        r"no checkpoint \(give a workdir written by train\.py",
    ):
        warm_start.from_checkpoint(str(tmp_path / "empty"), {}, num_classes=2)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors': not a "
        r"folder \(give a workdir",
    ):
        warm_start.from_checkpoint(
            str(tmp_path / "model.safetensors"), {}, num_classes=2
        )


def test_a_checkpoint_of_another_model_matches_nothing(runs):
    source, _, _, _ = runs
    with pytest.raises(
        ValueError,
        match=r"none of the arrays of .*/3 match "
        r"this model \(path and shape\)",
    ):
        warm_start.from_checkpoint(
            str(source / "checkpoints" / "3"),
            {"backbone/x/kernel": (3, 3)},
            num_classes=2,
        )


def test_a_damaged_init_checkpoint_is_refused_as_a_resume_would(runs, tmp_path):
    source, _, _, _ = runs
    shutil.copytree(source / "checkpoints", tmp_path / "checkpoints")
    checkpoint_faults.change_one_value(
        tmp_path / "checkpoints", 3, under="params/"
    )
    with pytest.raises(
        ValueError,
        match=r"^config\.model\.init_checkpoint='.*': step 3 is damaged: "
        r"1 of \d+ arrays differ from their checksums at save time, "
        r"first 'params/",
    ):
        warm_start.from_checkpoint(str(tmp_path), {}, num_classes=2)
