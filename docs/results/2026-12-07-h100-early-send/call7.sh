#!/bin/bash
# Device call 7 (2026-12-07 morning): the early-send patch against the defaults at 64 MiB, 4 ranks,
# 1 MiB with 500 operations, alternately; then 64 MiB, 10 iterations, alternately, Gloo first.
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
[ -f /tmp/early/libdpa.so.0 ] || { rm -rf /tmp/src && cp -r $ROOT /tmp/src && (cd /tmp/src && git apply docs/results/2026-12-07-ci-vm-early-send/early-send.patch) && \
  CMAKE_PREFIX_PATH=/opt/deps/usr cmake -S /tmp/src -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPA_TESTS=OFF -DDPA_BENCHMARKS=OFF -DDPA_DPDK=OFF -DDPA_CUDA=OFF > /tmp/cmake.log 2>&1 && \
  cmake --build /tmp/b --target dpa > /tmp/build.log 2>&1 && mkdir -p /tmp/early && cp -L /tmp/b/src/libdpa.so.0 /tmp/early/ || { tail -20 /tmp/cmake.log /tmp/build.log; }; }
maps='import dpa._C; print([l.split()[-1] for l in open("/proc/self/maps") if "libdpa" in l][0])'
echo "defaults load: $(python3 -c "$maps")"; echo "early load: $(LD_LIBRARY_PATH=/tmp/early:$LD_LIBRARY_PATH python3 -c "$maps")"
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror" | tr -s ' ' | tr '\n' '|'; }
run() { local name=$1; shift; local s=$(date +%s); local out; out=$("$@" 2>&1); echo "-- $name ($? in $(( $(date +%s) - s )) s): $(echo "$out" | row)"; }
echo "== CPU 1 MiB, 4 ranks, 500 iterations (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
for rep in 1 2; do
  run "$rep defaults" timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 1MiB --iterations 500 --warmup 20 --backends dpa --json $R/mid-defaults-$rep.json
  run "$rep early" env LD_LIBRARY_PATH=/tmp/early:$LD_LIBRARY_PATH timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 1MiB --iterations 500 --warmup 20 --backends dpa --json $R/mid-early-$rep.json
done
echo "== CPU 64 MiB, 4 ranks, 10 iterations"
run "gloo" timeout 70 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends gloo --json $R/gloo.json
for rep in 1 2; do
  [ $(( $(date +%s) - t0 )) -lt 300 ] || break
  run "$rep defaults" timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa --json $R/defaults-$rep.json
  run "$rep early" env LD_LIBRARY_PATH=/tmp/early:$LD_LIBRARY_PATH timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 10 --warmup 1 --backends dpa --json $R/early-$rep.json
done
echo "end $(( $(date +%s) - t0 )) s"
