#!/bin/bash
# GPU host, warm after call 1: the same benchmarks on CPU tensors, then the GPT trained with FSDP
# and FSDP2 on Gloo and dpa (K = N) and FSDP with fastest-K under a persistent straggler.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
for c in reduce_scatter all_gather broadcast; do
  timeout 90 python3 -m dpa.bench -n 4 --device cpu --collective $c --iterations 40 --json $R/bench-cpu-$c.json \
    > $R/bench-cpu-$c.txt 2>&1; echo "bench cpu $c exit $? $(( $(date +%s) - t0 )) s"; grep -v "^dpa.bench:" $R/bench-cpu-$c.txt | head -20
done
timeout 280 python3 -m dpa.train -n 4 --device cuda --models gpt --stragglers none,persistent --runs gloo,dpa,reactive,preemptive \
  --wrap fsdp,fsdp2 --steps 30 --warmup-steps 3 --out $R/train --json $R/train.json 2>&1 | tail -30
echo "train exit $? $(( $(date +%s) - t0 )) s"
