"""Balanced positive / negative sampling with static shapes.

Shapes: N candidates, S samples (per image; vmap over the batch).
"""

import jax
import jax.numpy as jnp
from jax import lax

from detector.modeling import matcher


def sample_balanced(
    labels: jax.Array,
    key: jax.Array,
    *,
    num_samples: int,
    positive_fraction: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Samples up to num_samples candidates, positives capped at a fraction.

    Args:
      labels: int32[N] in {1 positive, 0 negative, -1 ignored}.
      key: this image's PRNG key.
      num_samples: S.
      positive_fraction: at most int(S * positive_fraction) positives;
        negatives fill the remaining slots.

    Returns:
      indices int32[S] into N (positives first, then negatives),
      is_positive bool[S], is_valid bool[S] (False: an empty slot).
    """
    num = labels.shape[0]
    if num < num_samples:  # pad with ignored candidates so top_k fits
        labels = jnp.pad(
            labels, (0, num_samples - num), constant_values=matcher.IGNORED
        )
    priority = jax.random.uniform(key, labels.shape)  # [0, 1)
    positive = labels == matcher.FOREGROUND
    cap = min(int(num_samples * positive_fraction), labels.shape[0])
    chosen = jnp.zeros(labels.shape, bool)
    if cap > 0:
        top_values, top_index = lax.top_k(
            jnp.where(positive, priority, -1.0), cap
        )
        chosen = chosen.at[top_index].set(top_values >= 0.0)
    rank = jnp.where(
        chosen,
        2.0 + priority,
        jnp.where(labels == matcher.BACKGROUND, 1.0 + priority, -1.0),
    )
    values, indices = lax.top_k(rank, num_samples)
    indices = jnp.minimum(indices, num - 1).astype(jnp.int32)
    return indices, values >= 2.0, values >= 1.0
