#!/bin/bash
# Call 2 (2026-12-06 afternoon): before (8109ffa) / after of the small-tensor changes, C++ and torch;
# the CPU table against Gloo; 64 MiB with 12 ranks; CUDA against Gloo.
cd "$(dirname "$0")/.."
ROOT=$PWD
R=$OUT/r; mkdir -p $R
exec > $R/run8.log 2>&1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
t0=$(date +%s)
(TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; echo PIP FAILED; }) & p1=$!
(cd .devtmp/before && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/pkg-before ./python > /tmp/pip-before.log 2>&1 || { tail -30 /tmp/pip-before.log; echo PIP BEFORE FAILED; }) & p2=$!
A=$ROOT/.devdpdk/bin/dpa-bench; BB=$ROOT/.devtmp/bt/dpa-bench
L_AFTER=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu; L_BEFORE=$ROOT/.devtmp/bt:$L_AFTER
lscpu | grep -E "Model name|^CPU\(s\)"
echo "== C++ dpa-bench -n 4 --sizes 4KiB, before (8109ffa) / after, while pip builds run? no: after them"
wait $p1 $p2
echo "pip builds $(( $(date +%s) - t0 )) s"
for rep in 1 2 3; do
  echo "-- rep $rep before"; LD_LIBRARY_PATH=$L_BEFORE timeout 30 $BB -n 4 --sizes 4,4KiB --iterations 20000 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ full|wrong elements"
  echo "-- rep $rep after"; LD_LIBRARY_PATH=$L_AFTER timeout 30 $A -n 4 --sizes 4,4KiB --iterations 20000 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ full|wrong elements"
done
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo|nccl)|wrong|Error|error" | head -12; }
for rep in 1 2; do
  echo "-- torch rep $rep before"; PYTHONPATH=/tmp/pkg-before timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB --iterations 2000 --backends dpa --json $R/cpu-before-$rep.json 2>&1 | row
  echo "-- torch rep $rep after"; timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB --iterations 2000 --backends dpa --json $R/cpu-after-$rep.json 2>&1 | row
done
echo "== CPU with Gloo (after)"
timeout 90 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,64KiB,1MiB --iterations 300 --json $R/cpu-gloo.json 2>&1 | row
echo "== 12 ranks, 64 MiB"
LD_LIBRARY_PATH=$L_AFTER timeout 80 $A -n 12 --sizes 64MiB --iterations 6 --warmup 1 2>&1 | tail -3
timeout 80 python3 $ROOT/scripts/gloo-baseline.py --ranks 12 --sizes 64MiB --iterations 6 2>&1 | tail -2
echo "== CUDA with Gloo (after)"
timeout 100 python3 -m dpa.bench -n 4 --device cuda --sizes 4KiB,64KiB,1MiB --iterations 100 --json $R/cuda-gloo.json 2>&1 | row
echo "end $(( $(date +%s) - t0 )) s"
