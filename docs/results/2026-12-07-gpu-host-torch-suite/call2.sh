#!/bin/bash
# GPU host, warm after call 1: the suite on Gloo (the reference), then test_torch2.py's CPU cases.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd tests/python
CUDA_VISIBLE_DEVICES= timeout 400 python3 torch_suite/run_suite.py --backend gloo -n 2 --jobs 14 \
  --json $R/suite-gloo-w2.json 2> $R/suite-gloo-w2.err | tail -40
echo "suite gloo exit ${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"
CUDA_VISIBLE_DEVICES= timeout 150 python3 -m pytest -q -rs -p no:cacheprovider test_torch2.py 2>&1 | tail -15
echo "test_torch2 cpu done $(( $(date +%s) - t0 )) s"
