"""eval.py's request is checked before the checkpoint is read."""

import pytest

pytest.importorskip("pycocotools.cocoeval")
pytest.importorskip("tensorflow")

from detector.evaluation import eval_lib  # noqa: E402
from detector.state import train_state  # noqa: E402
from tests.detector.data import helpers  # noqa: E402


def test_a_split_that_does_not_exist_fails_before_the_checkpoint_loads(
    tmp_path, monkeypatch
):
    helpers.write_colour_coded(str(tmp_path / "data"), "val", 2, 48, 60)
    config = helpers.small_config(str(tmp_path / "data"))
    config.data.image_size = (64, 96)

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was read")

    monkeypatch.setattr(train_state, "restore_weights", never)
    monkeypatch.setattr(train_state, "check_restorable", lambda *a: None)
    with pytest.raises(FileNotFoundError) as error:
        eval_lib.evaluate_checkpoint(config, tmp_path / "run", split="test")
    assert str(error.value).endswith(
        "holds no annotations/instances_test.json (nor "
        "test/_annotations.coco.json); splits there: val; name one with "
        "--config.data.eval_split=..."
    )
    assert not (tmp_path / "run").exists()
