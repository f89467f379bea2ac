#!/bin/bash
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s)
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|skew|rror" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 4K/64K dpa: small busy poll variants, alternately"
for rep in 1 2; do for v in X=1 DPA_SMALL_BUSY_POLL_US=1000 DPA_SMALL_BUSY_POLL_US=200; do
  echo "-- $rep $v: $(env $v timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,64KiB --backends dpa 2>&1 | row)"
done; done
echo "t $(( $(date +%s) - t0 )) s"
echo "== CUDA 1 MiB variants, Gloo each rep"
for rep in 1 2; do
  echo "-- $rep gloo: $(timeout 40 python3 -m dpa.bench -n 4 --device cuda --sizes 1MiB --iterations 100 --backends gloo 2>&1 | row)"
  for v in X=1 DPA_SWITCH_THREADS=4 "DPA_TORCH_CUDA_INLINE_BYTES=524288 DPA_TORCH_PIPELINE_THRESH=1048576 DPA_TORCH_PIPELINE_CHUNKS=4" DPA_TORCH_CUDA_BLOCKS=gpu; do
    echo "-- $rep $v: $(env $v timeout 40 python3 -m dpa.bench -n 4 --device cuda --sizes 1MiB --iterations 100 --backends dpa 2>&1 | row)"
  done
done
echo "t $(( $(date +%s) - t0 )) s"
echo "== CPU 64 MiB default vs T=8, Gloo"
for rep in 1 2; do
  for v in X=1 DPA_THREADS=8; do
    echo "-- $rep $v: $(env $v timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa 2>&1 | row)"
  done
  echo "-- $rep gloo: $(timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends gloo 2>&1 | row)"
done
echo "end $(( $(date +%s) - t0 )) s"
