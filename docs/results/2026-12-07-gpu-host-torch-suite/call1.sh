#!/bin/bash
# GPU host (torch 2.x): PyTorch's whole distributed test suite (distributed_spawn.py) at world size 2
# on dpa, with CPU tensors (CUDA hidden: the suite's CUDA cases need one GPU per rank), then the same
# on Gloo in call 2. Builds the extension against the host's torch first.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation \
  --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
cd tests/python
CUDA_VISIBLE_DEVICES= timeout 470 python3 torch_suite/run_suite.py --backend dpa -n 2 --jobs 14 \
  --json $R/suite-dpa-w2.json 2> $R/suite-dpa-w2.err | tail -60
echo "suite dpa exit ${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"
