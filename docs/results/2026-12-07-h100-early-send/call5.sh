#!/bin/bash
# Device call 5 (2026-12-07 morning): (a) the early-send patch against the defaults at 64 MiB, 4 ranks,
# 20 iterations, alternately with Gloo, proving which libdpa each run loads; (b) the 4 KiB tail with
# 1000 operations: defaults against a 3 ms small-session spin.
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep -E "Model name"
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
[ -f /tmp/early/libdpa.so.0 ] || { rm -rf /tmp/src && cp -r $ROOT /tmp/src && (cd /tmp/src && git apply docs/results/2026-12-07-ci-vm-early-send/early-send.patch) && \
  CMAKE_PREFIX_PATH=/opt/deps/usr cmake -S /tmp/src -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPA_TESTS=OFF -DDPA_BENCHMARKS=OFF -DDPA_DPDK=OFF -DDPA_CUDA=OFF > /tmp/cmake.log 2>&1 && \
  cmake --build /tmp/b --target dpa > /tmp/build.log 2>&1 && mkdir -p /tmp/early && cp -L /tmp/b/src/libdpa.so.0 /tmp/early/ || { tail -20 /tmp/cmake.log /tmp/build.log; }; }
echo "patched libdpa $(ls /tmp/early) $(( $(date +%s) - t0 )) s"
readelf -d $(python3 -c "import dpa._C as c; print(c.__file__)") | grep -E "RPATH|RUNPATH"
maps='import dpa._C; print([l.split()[-1] for l in open("/proc/self/maps") if "libdpa" in l][0])'
echo "defaults load: $(python3 -c "$maps")"; echo "early load: $(LD_LIBRARY_PATH=/tmp/early:$LD_LIBRARY_PATH python3 -c "$maps")"
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 64 MiB, 4 ranks, 20 iterations (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
for rep in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -lt 300 ] || break
  echo "-- $rep gloo: $(timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 20 --warmup 2 --backends gloo --json $R/gloo-$rep.json 2>&1 | row)"
  for v in defaults early; do
    lib=$LD_LIBRARY_PATH; [ $v = early ] && lib=/tmp/early:$LD_LIBRARY_PATH
    echo "-- $rep $v: $(LD_LIBRARY_PATH=$lib timeout 45 python3 -m dpa.bench -n 4 --device cpu --sizes 64MiB --iterations 20 --warmup 2 --backends dpa --json $R/$v-$rep.json 2>&1 | row)"
  done
done
echo "== CPU 4 KiB, 4 ranks, 1000 iterations"
for rep in 1 2; do for v in defaults spin3ms; do
  [ $(( $(date +%s) - t0 )) -lt 420 ] || break 2
  extra=""; [ $v = spin3ms ] && extra="DPA_SMALL_BUSY_POLL_US=3000"
  echo "-- $rep $v: $(env $extra timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB --iterations 1000 --warmup 50 --backends dpa --json $R/small-$v-$rep.json 2>&1 | row)"
done; done
echo "end $(( $(date +%s) - t0 )) s"
