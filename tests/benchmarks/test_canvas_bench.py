"""benchmarks/canvas_bench.py: the COCO-like size mix and its measures."""

import collections

from benchmarks import canvas_bench


def test_size_mix_has_the_sample_counts():
    sizes = canvas_bench.coco_like_sizes(0)
    assert len(sizes) == 128
    assert sum(max(s) == 640 for s in sizes) == 110
    assert sum(w > h for h, w in sizes) == 92
    assert sum(w < h for h, w in sizes) == 34
    counts = collections.Counter(sizes)
    assert counts[(480, 640)] == 35 and counts[(427, 640)] == 12
    assert counts[(640, 480)] >= 9 and counts[(640, 427)] >= 6


def test_measures_padding_and_programs():
    results = canvas_bench.measure([(480, 640), (640, 480)])
    square = results["shortest_edge, one 1344x1344 canvas (`:torchvision`)"]
    # 800 x 1066 twice (either way round) on 1344 x 1344.
    assert square["programs"] == 1
    assert abs(square["padded_fraction"] - (1 - 800 * 1066 / 1344**2)) < 1e-9
    pair = results[
        "shortest_edge, 832x1344 + 1344x832 by orientation (the 1x config)"
    ]
    # Each orientation on its own canvas: 800 x 1066 of 832 x 1344.
    assert pair["programs"] == 2
    assert abs(pair["padded_fraction"] - (1 - 800 * 1066 / (832 * 1344))) < 1e-9
    # Training draws short sides 640..800: smaller images, more padding.
    assert pair["train"]["padded_fraction"] > pair["padded_fraction"]
    per_image = results["shortest_edge, torchvision (per image, x32)"]
    assert per_image["pixels_vs_torchvision"] == 1.0
