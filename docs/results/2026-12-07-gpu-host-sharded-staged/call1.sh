#!/bin/bash
# GPU host (torch 2.x + CUDA, 4 ranks sharing the GPU): the sharded collectives with CUDA tensors
# staged through pinned memory on side streams. Builds the extension with libsodium (default
# DPA_AUTH=join), runs the sharded tests on CUDA, then dpa.bench --collective reduce_scatter,
# all_gather and broadcast on CUDA and CPU tensors, 4 ranks, Gloo in the same run.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/deps
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation \
  --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
grep -i "libsodium" $R/pip.log | head -3
cd tests/python
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider test_sharded.py \
  "test_torch2.py::test_sharded_and_compiled_training_matches_a_single_process" \
  --junitxml=$R/pytest.xml 2>&1 | tail -15
echo "pytest done $(( $(date +%s) - t0 )) s"
cd /tmp
for spec in cuda:reduce_scatter cuda:all_gather cuda:broadcast cpu:reduce_scatter cpu:all_gather cpu:broadcast; do
  d=${spec%%:*}; c=${spec##*:}
  timeout 75 python3 -m dpa.bench -n 4 --device $d --collective $c --iterations 30 --json $R/bench-$d-$c.json \
    > $R/bench-$d-$c.txt 2>&1; echo "bench $d $c exit $? $(( $(date +%s) - t0 )) s"
  grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)" $R/bench-$d-$c.txt
done
