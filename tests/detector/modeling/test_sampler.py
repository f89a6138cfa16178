"""detector/modeling/sampler.py: static-shape balanced sampling."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from detector.modeling import sampler


def _sample(labels, seed, num_samples=8, fraction=0.25):
    fn = jax.jit(
        functools.partial(
            sampler.sample_balanced,
            num_samples=num_samples,
            positive_fraction=fraction,
        )
    )
    return [
        np.asarray(x)
        for x in fn(jnp.asarray(labels, jnp.int32), jax.random.key(seed))
    ]


def test_positives_capped_first_and_negatives_fill():
    labels = np.array([1] * 10 + [0] * 20 + [-1] * 5)
    indices, positive, valid = _sample(labels, 0)
    assert valid.all()
    np.testing.assert_array_equal(positive, [True] * 2 + [False] * 6)
    assert (labels[indices[:2]] == 1).all()
    assert (labels[indices[2:]] == 0).all()
    assert len(set(indices.tolist())) == 8


def test_few_candidates_leave_invalid_slots_and_never_pick_ignored():
    labels = np.array([-1, 0, -1, 1, -1])
    indices, positive, valid = _sample(labels, 1)
    assert valid.sum() == 2 and positive.sum() == 1
    assert set(indices[valid].tolist()) == {1, 3}
    assert positive[0] and valid[:2].all()
    assert (indices >= 0).all() and (indices < len(labels)).all()


def test_keys_change_the_sample():
    labels = np.array([0] * 40)
    picks = {
        tuple(sorted(_sample(labels, seed)[0].tolist())) for seed in range(4)
    }
    assert len(picks) > 1
