#!/bin/bash
# Device call 2 (GPU host, torch 2.x + CUDA, ranks sharing the GPU): the exact block floating point
# on the GPU kernels (test_exact.py, test_cuda.py), timeouts with torch's meaning (test_timeouts.py),
# then training that proves the drop-in: the GPT trained with DDP, FSDP and FSDP2 on Gloo and on dpa
# from the same seed, 4 ranks, rank 1 of the dpa runs pausing 60 s before timed step 10 (a
# checkpoint) under torch's default process-group timeout.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation \
  --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
ROOT=$(pwd)
cd $ROOT/tests/python
timeout 170 python3 -m pytest -q -rs -p no:cacheprovider test_exact.py test_cuda.py test_timeouts.py \
  --junitxml=$R/pytest.xml 2>&1 | tail -25
echo "pytest done $(( $(date +%s) - t0 )) s"
cd /tmp
timeout 330 python3 -m dpa.train -n 4 --device cuda --models gpt --stragglers none --runs gloo,dpa \
  --wrap ddp,fsdp,fsdp2 --steps 30 --warmup-steps 3 --pause 1:10:60 --pause-runs dpa --out $R/train --json $R/train.json
echo "train exit $? $(( $(date +%s) - t0 )) s"
