#!/bin/bash
# Device call: the counters fix on torch 2.11; memory bandwidth; CPU 64 MiB 4 ranks: shm buffers recycled at every allocation (device-only patch, DPA_SHM_RECYCLE_EVERY) and DPA_PAYLOAD=8192; CPU 4/32/64 KiB: the small session spread over switch threads
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep -E "Model name|L2|L3"
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
echo "== diag, 2 ranks"; timeout 60 torchrun --nproc_per_node 2 $ROOT/.devtmp/diag.py 2>&1 | grep -E "^0 (before|after)|rror" | cut -c1-300
echo "== test_bench.py, the counters test"; timeout 150 python3 -m pytest -q $ROOT/tests/python/test_bench.py $ROOT/tests/python/test_allreduce.py -k "every_size or switch_counters" 2>&1 | tail -8
echo "== memory bandwidth"; timeout 60 python3 $ROOT/.devtmp/membw.py 1 4 8 16
echo "t $(( $(date +%s) - t0 )) s"
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror|counters" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 64 MiB, 4 ranks: defaults against shm buffers recycled at every allocation (a device-only patch) and DPA_PAYLOAD=8192, Gloo first"
[ $(( $(date +%s) - t0 )) -lt 200 ] && echo "-- gloo: $(timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends gloo 2>&1 | row)"
for rep in 1 2; do for v in X=1 DPA_SHM_RECYCLE_EVERY=1 DPA_PAYLOAD=8192; do
  [ $(( $(date +%s) - t0 )) -lt 330 ] || break 2
  echo "-- $rep $v: $(env $v timeout 45 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa --json $R/p-$rep-${v%%=*}${v##*=}.json 2>&1 | row)"
done; done
echo "== CPU 4, 32 (small session, 8 blocks) and 64 KiB (wide, 1 block), 4 ranks: the small session spread over 8 switch threads (defaults) against 1 switch thread and against every switch thread spinning 1 ms (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
[ $(( $(date +%s) - t0 )) -lt 400 ] && echo "-- gloo: $(timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,32KiB,64KiB --iterations 300 --warmup 3 --backends gloo 2>&1 | row)"
rep=0
for e in X=1 DPA_SWITCH_THREADS=1 X=1 DPA_SWITCH_THREADS=1 DPA_SWITCH_BUSY_POLL_US=1000; do
  rep=$((rep + 1))
  [ $(( $(date +%s) - t0 )) -lt 420 ] || break
  echo "-- $e: $(env $e timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,32KiB,64KiB --iterations 300 --warmup 3 --backends dpa --json $R/small-$rep.json 2>&1 | row)"
done
echo "end $(( $(date +%s) - t0 )) s"
