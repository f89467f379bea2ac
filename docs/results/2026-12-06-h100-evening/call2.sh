#!/bin/bash
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
t0=$(date +%s)
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; echo PIP FAILED; }
echo "pip build $(( $(date +%s) - t0 )) s"; nvidia-smi -L
A=$ROOT/.devdpdk/bin/dpa-bench; LA=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
timeout 60 python3 $ROOT/.devtmp/evbench.py
echo "== dpa.bench CPU 4KiB,64KiB,1MiB with Gloo, split"
timeout 120 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,64KiB,1MiB --iterations 300 --json $R/cpu-small.json 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|^# +[0-9]|rror"
echo "-- C++ dpa-bench 4KiB split"
LD_LIBRARY_PATH=$LA timeout 40 $A -n 4 --sizes 4KiB --iterations 3000 2>&1 | grep -E "^ +4096|^# +4096|rror"
echo "t $(( $(date +%s) - t0 )) s"
echo "== 64 MiB loop under perf (4 ranks)"
export PATH=$ROOT/.devperf:$PATH
(timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/loop64.py 12 > /tmp/loop.txt 2>&1) & lp=$!
sleep 9; LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 20 perf record -a -F 1999 -o /tmp/perf.data -- sleep 4 > /dev/null 2>&1
wait $lp; grep -E "^rank|ms/op" /tmp/loop.txt
LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 60 perf report -i /tmp/perf.data --sort comm --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -20 > $R/perf64-comm.txt
LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 90 perf report -i /tmp/perf.data --sort comm,dso,sym --stdio --percent-limit 0.4 2>/dev/null | grep -v "^#" | grep -v "^$" | cut -c1-170 | head -60 > $R/perf64-sym.txt
cat $R/perf64-comm.txt; head -40 $R/perf64-sym.txt
echo "t $(( $(date +%s) - t0 )) s"
echo "== C++ dpa-bench -n 4 64MiB thread variants"
for rep in 1 2; do
  for v in "default:" "s6:DPA_SWITCH_THREADS=6" "t3s4:DPA_THREADS=3 DPA_SWITCH_THREADS=4" "t3s6:DPA_THREADS=3 DPA_SWITCH_THREADS=6"; do
    tag=${v%%:*}; envs=${v#*:}
    echo "-- $tag $(env $envs LD_LIBRARY_PATH=$LA timeout 40 $A -n 4 --sizes 64MiB --iterations 8 --warmup 1 2>&1 | grep -E "^ +67108864|rror" | awk '{print "b2b", $5, "p50", $8, "p99", $9, "wrong", $10}')"
  done
done
echo "t $(( $(date +%s) - t0 )) s"
echo "== dpa.bench CPU 64 MiB 4 ranks with Gloo"
timeout 90 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 5 --warmup 1 --json $R/cpu64-3.json 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror"
echo "end $(( $(date +%s) - t0 )) s"
