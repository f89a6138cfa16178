"""benchmarks/mask_target_bench.py runs every mask target rule on its own
layout and reports the GT masks' bytes per image of each."""

import json
import pathlib
import subprocess
import sys

from detector.config import data as data_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bench_times_each_rule_on_its_layout(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "benchmarks/mask_target_bench.py",
            "--canvas=48,64",
            "--images=1",
            "--instances=3",
            "--max_instances=4",
            "--rois=4",
            "--gt_mask_size=8",
            "--mask_size=7",
            "--steps=1",
            "--warmup=0",
            f"--out={tmp_path}",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    report = json.loads((tmp_path / "mask_target_bench.json").read_text())
    rules = report["rules"]
    assert set(rules) == set(data_config.MASK_LAYOUTS)
    assert rules["crop"]["gt_mask_bytes_per_image"] == 4 * 8 * 8
    assert rules["torchvision"]["gt_mask_bytes_per_image"] == 4 * 48 * 8
    assert all(row["median_ms"] > 0 for row in rules.values())
