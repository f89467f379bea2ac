#!/bin/bash
# Device call 1 of 2026-12-06 (evening): p99 decomposition, small spin A/B, CPU 64 MiB, CUDA floor.
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
t0=$(date +%s)
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; echo PIP FAILED; }
echo "pip build $(( $(date +%s) - t0 )) s"; lscpu | grep -E "Model name|^CPU\(s\)"; nvidia-smi -L
A=$ROOT/.devdpdk/bin/dpa-bench; LA=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo|nccl)|wrong|Error|error" | head -12; }
echo "== skew decomposition, 4 KiB, 4 ranks"
for rep in 1 2; do
  for v in "default:" "small1000:DPA_SMALL_BUSY_POLL_US=1000" "all300:DPA_BUSY_POLL_US=300"; do
    tag=${v%%:*}; envs=${v#*:}
    env $envs TAG=$tag timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/skew.py 2000 1024 gloo dpa$([ $rep = 1 ] && [ $tag = default ] && echo ,gloo) 2>&1 | grep -vE "^W|OMP|^\*|warn" | head -20
  done
  TAG=default timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/skew.py 2000 1024 dpa dpa,gloo 2>&1 | grep -vE "^W|OMP|^\*|warn" | head -14
done
echo "t $(( $(date +%s) - t0 )) s"
echo "== dpa.bench CPU 4 KiB, default / DPA_SMALL_BUSY_POLL_US=1000, alternately"
for rep in 1 2 3; do
  echo "-- default $rep"; timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB --iterations 2000 --backends dpa --json $R/small-default-$rep.json 2>&1 | row
  echo "-- small1000 $rep"; DPA_SMALL_BUSY_POLL_US=1000 timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB --iterations 2000 --backends dpa --json $R/small-1000-$rep.json 2>&1 | row
done
echo "t $(( $(date +%s) - t0 )) s"
echo "== CPU 64 MiB, 4 ranks, with Gloo"
for rep in 1 2; do
  timeout 90 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 5 --warmup 1 --json $R/cpu64-$rep.json 2>&1 | row
done
echo "-- C++ dpa-bench -n 4 64MiB, and Gloo baseline"
LD_LIBRARY_PATH=$LA timeout 60 $A -n 4 --sizes 64MiB --iterations 8 --warmup 1 2>&1 | tail -4
timeout 60 python3 $ROOT/scripts/gloo-baseline.py --ranks 4 --sizes 64MiB --iterations 8 2>&1 | tail -2
echo "-- perf -a during C++ dpa-bench -n 4 64MiB"
export PATH=$ROOT/.devperf:$PATH
(LD_LIBRARY_PATH=$LA timeout 60 $A -n 4 --sizes 64MiB --iterations 40 --warmup 1 > /tmp/b64.txt 2>&1) & bp=$!
sleep 4; LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 20 perf record -a -g -F 999 -o /tmp/perf.data -- sleep 4 > /dev/null 2>&1
wait $bp; tail -3 /tmp/b64.txt
LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 120 perf report -i /tmp/perf.data --no-children --sort comm,dso,sym -g none --percent-limit 0.5 --stdio 2>/dev/null | grep -v "^$" | grep -v "^#" | cut -c1-180 | head -70 > $R/perf64.txt
head -45 $R/perf64.txt
echo "t $(( $(date +%s) - t0 )) s"
echo "== CUDA floor (copies only) and dpa.bench CUDA"
timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/cudafloor.py 1024 300 2>&1 | grep floor
timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/cudafloor.py 262144 300 2>&1 | grep floor
timeout 60 torchrun --nproc_per_node 1 $ROOT/.devtmp/cudafloor.py 1024 300 2>&1 | grep floor
timeout 120 python3 -m dpa.bench -n 4 --device cuda --sizes 4KiB,64KiB,1MiB --iterations 100 --json $R/cuda.json 2>&1 | row
echo "== test_cuda (event pool)"
cd $ROOT/tests/python && python3 -m pytest --version 2>&1 | head -1
timeout 170 python3 -m pytest -x -q test_cuda.py 2>&1 | tail -15
echo "end $(( $(date +%s) - t0 )) s"
