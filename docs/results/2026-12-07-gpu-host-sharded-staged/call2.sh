#!/bin/bash
# GPU host, warm after call 1: the GPT trained sharded (FSDP and FSDP2) on Gloo, dpa (K = N) and
# dpa with preemptive fastest-K (dpa.register_fsdp_hook) without and with a persistent straggler;
# then the cost of authenticated data (DPA_AUTH off, join, data) on CUDA all_reduce, 4 ranks.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s)
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
cd /tmp
timeout 330 python3 -m dpa.train -n 4 --device cuda --models gpt --stragglers none,persistent \
  --runs gloo,dpa,preemptive --wrap fsdp,fsdp2 --steps 20 --warmup-steps 3 --out $R/train --json $R/train.json 2>&1 | tail -30
echo "train exit $? $(( $(date +%s) - t0 )) s"
for auth in off join data; do
  DPA_AUTH=$auth timeout 70 python3 -m dpa.bench -n 4 --device cuda --sizes 4KiB,64MiB --iterations 20 \
    --json $R/bench-auth-$auth.json > $R/bench-auth-$auth.txt 2>&1
  echo "bench DPA_AUTH=$auth exit $? $(( $(date +%s) - t0 )) s"
  grep -E "^ +[0-9]+ +[0-9]+ +(dpa|gloo)" $R/bench-auth-$auth.txt
done
