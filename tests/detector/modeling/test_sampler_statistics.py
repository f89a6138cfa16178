"""sampler.sample_balanced against torchvision's
BalancedPositiveNegativeSampler, statistically: over 1000 draws on one
image's labels, at the RPN's settings (256, 0.5) and the roi sampler's
(512, 0.25), with more positives than the cap so both choices are random.

Per draw the counts are fixed by the labels (min(positives, cap), then
negatives up to the total), and must equal torchvision's in every draw;
which candidates are chosen must follow the same distribution: a
chi-square test of homogeneity on how often each candidate is chosen
(positives and negatives apart), never rejecting at p < 0.01 (conservative:
a draw without replacement varies less than the test's multinomial;
measured p >= 0.99 on both settings).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from detector.modeling import sampler
from tests.helpers import torch_process

DRAWS = 1000
P_VALUE = 0.01
# One image: 400 positives, 1600 negatives, 500 ignored, shuffled.
_RNG = np.random.default_rng(0)
LABELS = _RNG.permutation(np.repeat([1, 0, -1], [400, 1600, 500]))

_TORCHVISION = """
import sys, numpy as np, torch
from torchvision.models.detection._utils import BalancedPositiveNegativeSampler
labels = torch.from_numpy(np.load(sys.argv[1]))
size, fraction, draws = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
draw = BalancedPositiveNegativeSampler(size, fraction)
torch.manual_seed(0)
positive = np.zeros((draws, len(labels)), bool)
negative = np.zeros((draws, len(labels)), bool)
for i in range(draws):
    (pos,), (neg,) = draw([labels])
    positive[i], negative[i] = pos.numpy() > 0, neg.numpy() > 0
np.savez(sys.argv[2], positive=positive, negative=negative)
"""


def _torchvision(tmp_path, size: int, fraction: float):
    np.save(tmp_path / "labels.npy", LABELS.astype(np.int64))
    out = tmp_path / "drawn.npz"
    torch_process.run(
        [
            "-c",
            _TORCHVISION,
            str(tmp_path / "labels.npy"),
            str(out),
            str(size),
            str(fraction),
            str(DRAWS),
        ]
    )
    drawn = np.load(out)
    return drawn["positive"], drawn["negative"]


def _ours(size: int, fraction: float):
    draw = functools.partial(
        sampler.sample_balanced, num_samples=size, positive_fraction=fraction
    )
    keys = jax.random.split(jax.random.key(0), DRAWS)
    indices, is_positive, is_valid = jax.jit(jax.vmap(draw, (None, 0)))(
        jnp.asarray(LABELS, jnp.int32), keys
    )
    indices, is_positive, is_valid = (
        np.asarray(x) for x in (indices, is_positive, is_valid)
    )
    rows = np.broadcast_to(np.arange(DRAWS)[:, None], indices.shape)
    chosen = []
    for kind in (is_positive, is_valid & ~is_positive):
        drawn = np.zeros((DRAWS, len(LABELS)), bool)
        drawn[rows[kind], indices[kind]] = True
        chosen.append(drawn)
    return tuple(chosen)


@torch_process.needs_torch
@pytest.mark.parametrize("size, fraction", [(256, 0.5), (512, 0.25)])
def test_samples_are_distributed_as_torchvisions(tmp_path, size, fraction):
    theirs = _torchvision(tmp_path, size, fraction)
    ours = _ours(size, fraction)
    for kind, label, mine, their in zip(
        ("positive", "negative"), (1, 0), ours, theirs, strict=True
    ):
        np.testing.assert_array_equal(
            mine.sum(axis=1), their.sum(axis=1), err_msg=kind
        )
        assert not (mine & (label != LABELS)).any(), kind
        candidates = label == LABELS
        table = np.stack(
            [mine.sum(axis=0)[candidates], their.sum(axis=0)[candidates]]
        )
        p_value = stats.chi2_contingency(table).pvalue
        print(size, fraction, kind, f"p = {p_value:.3f}")
        assert p_value >= P_VALUE, (kind, p_value)
