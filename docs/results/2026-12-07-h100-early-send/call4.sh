#!/bin/bash
# Device call (prepared 2026-12-07 for the next session): the early-send patch
# (docs/results/2026-12-07-ci-vm-early-send/early-send.patch) against the defaults, CPU 64 MiB and 1 MiB,
# 4 ranks, alternately, Gloo first; the patched libdpa swapped in with LD_LIBRARY_PATH (the module's
# RUNPATH finds the one pip installed otherwise).
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep -E "Model name|L3"
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
rm -rf /tmp/src && cp -r $ROOT /tmp/src && (cd /tmp/src && git apply docs/results/2026-12-07-ci-vm-early-send/early-send.patch) && \
  CMAKE_PREFIX_PATH=/opt/deps/usr cmake -S /tmp/src -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPA_TESTS=OFF -DDPA_BENCHMARKS=OFF -DDPA_DPDK=OFF -DDPA_CUDA=OFF > /tmp/cmake.log 2>&1 && \
  cmake --build /tmp/b --target dpa > /tmp/build.log 2>&1 && mkdir -p /tmp/early && cp -L /tmp/b/src/libdpa.so.0 /tmp/early/ || { tail -20 /tmp/cmake.log /tmp/build.log; }
echo "patched libdpa $(ls /tmp/early) $(( $(date +%s) - t0 )) s"
python3 -c "import dpa, os; print(os.path.dirname(dpa.__file__))"; ldd $(python3 -c "import dpa._C as c; print(c.__file__)") | grep libdpa
cd /tmp
row() { grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)|rror" | tr -s ' ' | tr '\n' '|'; }
echo "== CPU 1 MiB and 64 MiB, 4 ranks (size elems backend iters b2b_us algbw busbw p50 p99 wrong)"
echo "-- gloo: $(timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 1MiB,64MiB --iterations 10 --warmup 1 --backends gloo 2>&1 | row)"
for rep in 1 2 3; do for v in defaults early; do
  [ $(( $(date +%s) - t0 )) -lt 340 ] || break 2
  lib=$LD_LIBRARY_PATH; [ $v = early ] && lib=/tmp/early:$LD_LIBRARY_PATH
  echo "-- $rep $v: $(LD_LIBRARY_PATH=$lib timeout 45 python3 -m dpa.bench -n 4 --device cpu --sizes 1MiB,64MiB --iterations 10 --warmup 1 --backends dpa --json $R/$v-$rep.json 2>&1 | row)"
done; done
echo "== CPU 4 KiB and 1 MiB, 4 ranks, 200 iterations"
for v in defaults early defaults early; do
  [ $(( $(date +%s) - t0 )) -lt 440 ] || break
  lib=$LD_LIBRARY_PATH; [ $v = early ] && lib=/tmp/early:$LD_LIBRARY_PATH
  echo "-- $v: $(LD_LIBRARY_PATH=$lib timeout 40 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,1MiB --iterations 200 --warmup 10 --backends dpa 2>&1 | row)"
done
echo "end $(( $(date +%s) - t0 )) s"
