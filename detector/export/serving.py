"""The exported function: the one inference function
(`detector.inference.detect`) with the weights as its first argument
(docs/export-and-predict.md)."""

from collections.abc import Callable

import jax
import ml_collections
from flax import nnx

from detector.inference import detect

# (weights, images, image_sizes, orig_sizes) -> OUTPUTS, weights the flat
# leaves of (params, rest) in jax.tree order.
WeightedFn = Callable[
    [list[jax.Array], jax.Array, jax.Array, jax.Array], dict[str, jax.Array]
]


def weighted_fn(
    config: ml_collections.ConfigDict,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    rest: nnx.State,
    category_ids: list[int],
) -> tuple[WeightedFn, list]:
    """`detect.detect_fn` with the weights as its first argument, and the
    weights: the leaves of (params, rest) (BatchNorm statistics in `rest`),
    in the fixed order of `jax.tree.leaves`."""
    weights, treedef = jax.tree.flatten((params, rest))
    fn = detect.detect_fn(config, graphdef, category_ids)

    def serve(
        weights: list[jax.Array],
        images: jax.Array,
        image_sizes: jax.Array,
        orig_sizes: jax.Array,
    ) -> dict[str, jax.Array]:
        params, rest = jax.tree.unflatten(treedef, weights)
        return fn(params, rest, images, image_sizes, orig_sizes)

    return serve, weights
