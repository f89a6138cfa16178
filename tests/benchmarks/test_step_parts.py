"""benchmarks/step_parts.py: the stages add up to the train step's FLOPs."""

import pytest

from benchmarks import step_parts
from detector.distributed import sharding
from tests.detector.helpers import tiny_config


@pytest.mark.parametrize("norm", ["group", "frozen_batch"])
def test_stage_flops_add_up_to_the_train_step(norm):
    config = tiny_config("while_loop")
    config.train.batch_size = 2
    config.model.norm = norm  # frozen_batch: statistics outside the params
    gflop = step_parts.count_parts(config, sharding.make_mesh())
    stages = sum(gflop[name] for name in step_parts.STAGES[:-1])
    assert gflop["backbone_fpn"] > 0 and gflop["mask"] > 0
    # Every conv and matmul of the step runs in exactly one stage.
    assert stages == pytest.approx(gflop["train step"], rel=1e-9)
    assert 0 < gflop["predict"] < gflop["train step"]
