#!/usr/bin/env bash
# On the GPU machine: build, run every test (GPU ones included), the GPU tests under
# compute-sanitizer memcheck, and `stg step` against the independent PyTorch implementation.
# Usage: tools/gpu_check.sh [OUTDIR]    (needs .deps from ../shared/device/prep.sh)
set -uo pipefail
out=${1:-/tmp/stg-gpu}
mkdir -p "$out"
source .deps/env.sh
set -e
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build-gpu 2>&1 | tail -3
set +e
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
ctest --test-dir build-gpu --output-on-failure 2>&1 | tee "$out/ctest.txt" | tail -15
runs=()
for t in $(cd build-gpu && ls test_gpu_*); do runs+=("memcheck:$t"); done
echo "== compute-sanitizer memcheck"
SAN_PAR=0 tools/sanitize_gpu.sh build-gpu "$out" 600 "${runs[@]}"
echo "== stg step against PyTorch (float64)"
dims=vocab=256,d_model=64,d_ff=176,n_layers=2,n_heads=4
./build-gpu/stg train models/tiny.yaml --device cpu --steps 3 --ckpt "$out/ck" >/dev/null || echo "train failed"
python3 tools/ref/torch_step.py --make-batch --batch "$out/batch.npy" --batch-shape 8,64 --params x --dims $dims
for dev in cpu cuda; do
  ./build-gpu/stg step models/tiny.yaml --device $dev --init "$out/ck/ckpt.safetensors" --batch "$out/batch.npy" --dump "$out/step_$dev.safetensors"
  python3 tools/ref/torch_step.py --params "$out/ck/ckpt.safetensors" --batch "$out/batch.npy" --dump "$out/step_$dev.safetensors" --dims $dims
  echo "step $dev vs torch: rc=$?"
done
