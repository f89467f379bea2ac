#!/bin/bash
# Device call: build the extension, then the table (CUDA and CPU, 4 ranks, Gloo in the same run).
ROOT=$(pwd); R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep "Model name"; git log --oneline -1 2>/dev/null
python3 -c "import dpa" 2>/dev/null || { mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done; CMAKE_PREFIX_PATH=/opt/deps/usr LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > /tmp/pip.log 2>&1 || tail -30 /tmp/pip.log; echo "pip $(( $(date +%s) - t0 )) s"; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
echo "== dpa.bench CUDA all sizes, defaults"
timeout 170 python3 -m dpa.bench -n 4 --device cuda --json $R/cuda.json 2>&1 | grep -vE "^$" | tail -26
echo "t $(( $(date +%s) - t0 )) s"
echo "== dpa.bench CPU all sizes, defaults"
timeout 200 python3 -m dpa.bench -n 4 --device cpu --json $R/cpu.json 2>&1 | grep -vE "^$" | tail -26
echo "end $(( $(date +%s) - t0 )) s"
