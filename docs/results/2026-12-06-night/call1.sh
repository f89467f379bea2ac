#!/bin/bash
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
t0=$(date +%s); nvidia-smi -L; nproc; lscpu | grep "Model name"; git log --oneline -1
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || { tail -30 /tmp/pip.log; echo PIP FAILED; }; echo "pip build done $(( $(date +%s) - t0 )) s"
A=$ROOT/.devdpdk/bin/dpa-bench; LA=$ROOT/.devdpdk/lib:/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
echo "== dpa.bench CUDA all sizes, 4 ranks sharing the GPU, with Gloo (defaults)"
timeout 150 python3 -m dpa.bench -n 4 --device cuda --json $R/cuda.json 2>&1 | grep -vE "^$" | tail -26
echo "t $(( $(date +%s) - t0 )) s"
echo "== dpa.bench CPU all sizes, 4 ranks, with Gloo (defaults)"
timeout 200 python3 -m dpa.bench -n 4 --device cpu --json $R/cpu.json 2>&1 | grep -vE "^$" | tail -26
echo "t $(( $(date +%s) - t0 )) s"
echo "== CPU 4 KiB, 64 KiB with the Gloo barrier alone"
timeout 60 python3 -m dpa.bench -n 4 --device cpu --sizes 4KiB,64KiB --barrier gloo --json $R/cpu-gloo-barrier.json 2>&1 | grep -vE "^$" | tail -12
echo "t $(( $(date +%s) - t0 )) s"
cxx() { # tag ranks iterations envs...
  local tag=$1 n=$2 it=$3; shift 3
  echo "-- $tag $(env "$@" LD_LIBRARY_PATH=$LA timeout 90 $A -n $n --sizes 64MiB --iterations $it --warmup 1 2>&1 | grep -E "^ +67108864|rror|sizing" | tr '\n' ' ')"
}
echo "== 2 and 12 ranks 64 MiB: C++ dpa-bench defaults, Gloo (dpa.bench) between"
for rep in 1 2; do
  cxx "n2 rep $rep default" 2 8 X=1
  echo "-- n2 rep $rep gloo: $(timeout 60 python3 -m dpa.bench -n 2 --device cpu --sizes 64MiB --iterations 8 --warmup 1 --backends gloo 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +gloo|rror")"
done
echo "t $(( $(date +%s) - t0 )) s"
cxx "n12 default" 12 6 X=1
echo "-- n12 gloo: $(timeout 120 python3 -m dpa.bench -n 12 --device cpu --sizes 64MiB --iterations 6 --warmup 1 --backends gloo 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +gloo|rror")"
cxx "n12 default rep2" 12 6 X=1
echo "t $(( $(date +%s) - t0 )) s"
echo "== CUDA 16 MiB variants (dpa only)"
for v in "X=1" "DPA_TORCH_PIPELINE_CHUNKS=4" "DPA_TORCH_PIPELINE_CHUNKS=16" "DPA_TORCH_CUDA_BLOCKS_MIN_BYTES=16777216" "DPA_THREADS=8"; do
  echo "-- $v: $(env $v timeout 45 python3 -m dpa.bench -n 4 --device cuda --sizes 16MiB --iterations 20 --backends dpa 2>&1 | grep -E "^ +16777216|rror")"
done
echo "end $(( $(date +%s) - t0 )) s"
