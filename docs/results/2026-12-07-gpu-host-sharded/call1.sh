#!/bin/bash
# GPU host (torch 2.x + CUDA, ranks sharing the GPU): the sharded collectives through the switch.
# Builds the extension, runs their tests (CPU and CUDA tensors; FSDP with dpa.register_fsdp_hook),
# then dpa.bench --collective reduce_scatter and all_gather on CUDA tensors, 4 ranks, Gloo in the
# same run.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation \
  --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
cd tests/python
timeout 170 python3 -m pytest -q -rs -p no:cacheprovider test_sharded.py \
  "test_torch2.py::test_sharded_and_compiled_training_matches_a_single_process" \
  --junitxml=$R/pytest.xml 2>&1 | tail -25
echo "pytest done $(( $(date +%s) - t0 )) s"
cd /tmp
for c in reduce_scatter all_gather; do
  timeout 110 python3 -m dpa.bench -n 4 --device cuda --collective $c --iterations 30 --json $R/bench-cuda-$c.json \
    > $R/bench-cuda-$c.txt 2>&1; echo "bench cuda $c exit $? $(( $(date +%s) - t0 )) s"
  grep -v "^dpa.bench: [0-9]" $R/bench-cuda-$c.txt | head -16
done
