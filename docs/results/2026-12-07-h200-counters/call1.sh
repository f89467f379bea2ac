#!/bin/bash
# Device call: why the embedded switch's counters read 0 on torch 2.11; CPU 64 MiB 4 ranks, window 8 (sized) against 16.
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep "Model name"
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
echo "== diag, 2 ranks"; timeout 60 torchrun --nproc_per_node 2 $ROOT/.devtmp/diag.py 2>&1 | grep -v "^\s*$" | grep -v OMP_NUM | tail -24
echo "== diag, 4 ranks, CUDA_VISIBLE_DEVICES empty"; CUDA_VISIBLE_DEVICES= timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/diag.py 2>&1 | grep -E "^0 |rror" | tail -12
echo "== test_bench size tests"; timeout 200 python3 -m pytest -x -q $ROOT/tests/python/test_bench.py -k every_size 2>&1 | tail -40
echo "t $(( $(date +%s) - t0 )) s"
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror|counters" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 64 MiB, 4 ranks: window 8 (sized) against 16, alternately, Gloo each round (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
for rep in 1 2; do
  echo "-- $rep gloo: $(timeout 50 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends gloo 2>&1 | row)"
  for v in X=1 DPA_WINDOW=16; do
    echo "-- $rep $v: $(env $v timeout 50 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa --json $R/w-$rep-${v%%=*}${v##*=}.json 2>&1 | row)"
  done
  echo "t $(( $(date +%s) - t0 )) s"
done
echo "end $(( $(date +%s) - t0 )) s"
