"""The shapes config's train step and predict, and the Pallas NMS kernel
alone, compiled by libtpu's XLA and Mosaic compilers for a v5e 2x2
topology from a host without a TPU (benchmarks/tpu_compile.py): lowering
alone (tests/test_lowering.py) runs neither Mosaic's compiler nor XLA's
TPU passes. Needs the `tpu` extra; run with `-m tpu` (minutes each)."""

import pytest

pytest.importorskip("libtpu", reason="needs libtpu (the 'tpu' extra)")

from benchmarks import collectives, tpu_compile  # noqa: E402
from configs import shapes as shapes_config  # noqa: E402

pytestmark = [pytest.mark.tpu, pytest.mark.slow]

TOPOLOGY = "v5e:2x2"
CHIPS = 4


@pytest.fixture(scope="module")
def mesh():
    return tpu_compile.topology_mesh(TOPOLOGY)


@pytest.fixture(scope="module")
def config():
    config = shapes_config.get_config()
    config.train.batch_size = CHIPS  # one image per chip
    config.eval.batch_size = CHIPS
    return tpu_compile.for_tpu(config, "pallas")


def _checked(report: tpu_compile.Report, mosaic_calls: int) -> None:
    assert report.mosaic_calls == mosaic_calls
    assert 0 < report.hbm_bytes < tpu_compile_hbm_bound()
    assert report.cost["flops"] > 0
    assert report.cost["bytes accessed"] > 0


def tpu_compile_hbm_bound() -> int:
    """A v5e chip's HBM, which the tiny programs stay far under."""
    return 16 * 2**30


def test_train_step_compiles_with_the_mosaic_kernel_and_an_all_reduce(
    mesh, config
):
    canvas = tuple(config.data.image_size)
    report = tpu_compile.compile_train_step(config, mesh, canvas)
    assert report.chips == CHIPS
    _checked(report, mosaic_calls=1)  # the RPN's NMS site
    ops = {c.op for c in collectives.collectives(report.hlo)}
    assert "all-reduce" in ops  # gradients averaged over the chips


def test_predict_compiles_with_the_mosaic_kernel_at_both_sites(mesh, config):
    canvas = tuple(config.data.image_size)
    _checked(tpu_compile.compile_predict(config, mesh, canvas), mosaic_calls=2)


def test_the_pallas_nms_kernel_compiles_alone(mesh):
    report = tpu_compile.compile_nms(mesh, "pallas", boxes=1000, keep=100)
    assert report.mosaic_calls == 1
    assert report.hbm_bytes > 0


def test_an_unknown_topology_is_one_line_naming_the_flag():
    with pytest.raises(ValueError, match=r"^--topology=v5e:3x7: ") as e:
        tpu_compile.topology("v5e:3x7")
    assert "\n" not in str(e.value)
