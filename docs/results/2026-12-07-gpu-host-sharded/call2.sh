#!/bin/bash
# GPU host, warm after call 1: broadcast on CUDA tensors and the three on CPU tensors (4 ranks,
# Gloo in the same run), then the GPT trained with FSDP on Gloo and dpa (K = N) and dpa with
# fastest-K (dpa.register_fsdp_hook) under a persistent straggler.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
for spec in cuda:broadcast cpu:reduce_scatter cpu:all_gather cpu:broadcast; do
  d=${spec%%:*}; c=${spec##*:}
  timeout 75 python3 -m dpa.bench -n 4 --device $d --collective $c --iterations 30 --json $R/bench-$d-$c.json \
    > $R/bench-$d-$c.txt 2>&1; echo "bench $d $c exit $? $(( $(date +%s) - t0 )) s"
  grep -v "^dpa.bench: [0-9]" $R/bench-$d-$c.txt | head -16
done
timeout 220 python3 -m dpa.train -n 4 --device cuda --models gpt --stragglers none,persistent \
  --runs gloo,dpa,preemptive --wrap fsdp --steps 20 --warmup-steps 3 --out $R/train --json $R/train.json 2>&1 | tail -25
echo "train exit $? $(( $(date +%s) - t0 )) s"
