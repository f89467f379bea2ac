#!/bin/bash
# Device call: CUDA/bench/barrier tests on torch 2.11; CPU 64 MiB, 4 ranks: spinning and thread variants, Gloo each round.
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep "Model name"
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 64 MiB, 4 ranks: variants alternately, Gloo each round (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
for rep in 1 2; do
  echo "-- $rep gloo: $(timeout 50 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends gloo 2>&1 | row)"
  for v in X=1 DPA_SWITCH_BUSY_POLL_US=200 "DPA_SWITCH_BUSY_POLL_US=200 DPA_SWITCH_THREADS=4" "DPA_THREADS=2 DPA_SWITCH_THREADS=4 DPA_BUSY_POLL_US=200" "DPA_THREADS=3 DPA_SWITCH_THREADS=4 DPA_SWITCH_BUSY_POLL_US=200" "DPA_SWITCH_BUSY_POLL_US=200 DPA_YIELD_SPIN=1"; do
    echo "-- $rep $v: $(env $v timeout 50 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa 2>&1 | row)"
  done
  echo "t $(( $(date +%s) - t0 )) s"
done
echo "end $(( $(date +%s) - t0 )) s"
