#!/bin/bash
# Call 1 (2026-12-06 afternoon): where a torch rank's 4 KiB CPU operation spends its time; the
# backend's lean submit before/after; 64 MiB with 8 and 12 ranks against Gloo.
cd "$(dirname "$0")/.."
ROOT=$PWD
R=$OUT/r; mkdir -p $R
exec > >(tee $R/run7.log) 2>&1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
t0=$(date +%s)
python3 -c 'import dpa' 2>/dev/null && [ -d /tmp/pkg-before/dpa ] && echo "packages already built" || {
(TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; echo PIP FAILED; }) & p1=$!
(cd .devtmp/before && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/pkg-before ./python > /tmp/pip-before.log 2>&1 || { tail -30 /tmp/pip-before.log; echo PIP BEFORE FAILED; }) & p2=$!
wait $p1 $p2; }
echo "pip builds $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu
B=$ROOT/.devdpdk/bin
lscpu | grep -E "Model name|^CPU\(s\)"
cd /tmp
prof() { timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/prof.py "$@" 2>&1 | grep -E "^rank|Error|error" | sort; }
echo "== C++ dpa-bench 4 KiB"
timeout 60 $B/dpa-bench -n 4 --sizes 4KiB --iterations 20000 2>&1 | tail -4
for rep in 1 2; do
  echo "-- rep $rep before (HEAD)"; PYTHONPATH=/tmp/pkg-before prof 6
  echo "-- rep $rep after"; prof 6
done
echo "-- after, DPA_TORCH_MODE=simple"; DPA_TORCH_MODE=simple prof 6
echo "-- after, DPA_BUSY_POLL_US=1000"; DPA_BUSY_POLL_US=1000 prof 6
echo "== perf of rank 1 and rank 0 (after)"
export PATH=$ROOT/.devperf:$PATH
(timeout 60 torchrun --nproc_per_node 4 $ROOT/.devtmp/prof.py 20 > $R/perf-loop.txt 2>&1) & loop=$!
sleep 12
for want in 1 0; do
  pid=""
  for p in $(pgrep -f "prof.py 20"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=$want" && pid=$p; done
  echo "rank $want pid $pid threads $(ls /proc/$pid/task | wc -l)"
  LD_LIBRARY_PATH=$ROOT/.devperf/lib timeout 20 perf record -F 4000 --call-graph dwarf,8192 -p $pid -o /tmp/p$want.data -- sleep 2 > /dev/null 2>&1
done
wait $loop
cat $R/perf-loop.txt | grep -E "^rank" | sort
for want in 1 0; do
  export LD_LIBRARY_PATH=$ROOT/.devperf/lib
  timeout 120 perf report -i /tmp/p$want.data --no-children --sort tid -g none --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -12 > $R/perf-r$want-threads.txt
  timeout 200 perf report -i /tmp/p$want.data --children --sort dso,sym -g none --stdio --percent-limit 0.7 2>/dev/null | grep -v "^#" | grep -v "^$" | cut -c1-220 | head -150 > $R/perf-r$want-children.txt
  timeout 120 perf report -i /tmp/p$want.data --no-children --sort dso,sym -g none --stdio --percent-limit 0.4 2>/dev/null | grep -v "^#" | grep -v "^$" | cut -c1-200 | head -70 > $R/perf-r$want-self.txt
done
export LD_LIBRARY_PATH=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu
cat $R/perf-r1-threads.txt; head -60 $R/perf-r1-children.txt
echo "== 64 MiB, C++ dpa-bench and Gloo baseline"
for n in 8 12; do
  echo "-- $n ranks"
  timeout 100 $B/dpa-bench -n $n --sizes 64MiB --iterations 6 --warmup 1 2>&1 | tail -3
  timeout 100 /usr/bin/env python3 $ROOT/scripts/gloo-baseline.py --ranks $n --sizes 64MiB --iterations 6 2>&1 | tail -3
done
tar czf $OUT/r.tgz -C $OUT r
