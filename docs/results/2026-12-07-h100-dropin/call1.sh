#!/bin/bash
# Device call 1 (GPU host, torch 2.x + CUDA): the drop-in backend. Every collective on every type,
# CPU and CUDA (tests/python/test_collectives.py); FSDP, FSDP2, DTensor, functional collectives,
# DDP under torch.compile, "cpu:gloo,cuda:dpa" (tests/python/test_torch2.py); then PyTorch's own
# distributed suite at world size 2 for dpa and for Gloo on this torch (CPU: the suite skips every
# test when a host has fewer GPUs than ranks).
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; lscpu | grep -E "Model name"; python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
cd tests/python
timeout 230 python3 -m pytest -q -rs -p no:cacheprovider test_collectives.py test_torch2.py --junitxml=$R/pytest.xml 2>&1 | tail -60
echo "pytest done $(( $(date +%s) - t0 )) s"
for backend in dpa gloo; do
  CUDA_VISIBLE_DEVICES= timeout $([ $backend = dpa ] && echo 150 || echo 110) python3 torch_suite/run_suite.py --backend $backend -n 2 --jobs 12 \
    --json $R/suite-$backend-w2.json 2> $R/suite-$backend-w2.err | head -40
  echo "suite $backend done $(( $(date +%s) - t0 )) s"
done
