#!/usr/bin/env bash
# The GPU check of the NMS kernels, run on a CUDA GPU from the repository
# root (`OUT=results_dir bash benchmarks/gpu_check.sh`; about 8 minutes):
# the GPU tests (each CUDA kernel against the numpy reference), the NMS
# operator timed per CUDA kernel (Triton, Mosaic GPU) beside while_loop,
# the shapes train step per kernel on batches written beforehand by
# `python benchmarks/step_bench.py --config=configs/shapes.py
# --save_batches=shapes.npz --num_batches=4` where TensorFlow is installed
# ($BATCHES, default shapes.npz), then the model and export tests. The
# Mosaic GPU kernel becomes `pallas`' first choice on Hopper
# (ops/nms/pallas.py, CUDA_KERNELS) once its rows here are measured.
set -u
export PYTHONUNBUFFERED=1
out=${OUT:-benchmarks/out/gpu_check}
batches=${BATCHES:-shapes.npz}
mkdir -p "$out"
nvidia-smi -L
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
echo "== GPU kernel tests"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ops
echo "== NMS operator per CUDA kernel"
timeout 150 python3 benchmarks/nms_bench.py --reps 50 \
  --backends=while_loop,pallas_triton,pallas_mosaic_gpu --out "$out/nms"
echo "== shapes train step per CUDA kernel"
timeout 130 python3 benchmarks/step_bench.py --config=configs/shapes.py \
  --batches="$batches" --steps=20 --warmup=5 --out="$out/step" \
  --backends=while_loop,pallas_triton,pallas_mosaic_gpu,topk
echo "== model and export tests on the GPU"
timeout 140 python3 -m pytest -q -p no:cacheprovider -n 12 tests/ops \
  tests/detector/modeling tests/detector/export tests/test_lowering.py
