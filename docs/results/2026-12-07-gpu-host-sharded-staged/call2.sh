#!/bin/bash
# GPU host (torch 2.x + CUDA, 4 ranks sharing the GPU): builds the extension (libsodium carried,
# so DPA_AUTH works), trains the GPT sharded (FSDP and FSDP2) on Gloo, dpa (K = N) and dpa with
# preemptive fastest-K (dpa.register_fsdp_hook), without and with a persistent straggler; then
# the cost of authenticated data on CUDA all_reduce: DPA_AUTH off, join, data with each MAC.
R=$OUT
exec > >(tee $R/log) 2>&1
t0=$(date +%s); nvidia-smi -L; grep -o -w -m1 aes /proc/cpuinfo | head -1
mkdir -p /opt/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/deps
CMAKE_PREFIX_PATH=/opt/deps/usr TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation \
  --no-deps ./python > $R/pip.log 2>&1 || { tail -40 $R/pip.log; exit 1; }
echo "pip build $(( $(date +%s) - t0 )) s"
cd /tmp
timeout 200 python3 -m dpa.train -n 4 --device cuda --models gpt --stragglers none,persistent \
  --runs gloo,dpa,preemptive --wrap fsdp,fsdp2 --steps 20 --warmup-steps 3 --out $R/train --json $R/train.json 2>&1 \
  | grep -v "^  warnings.warn\|UserWarning" | tail -16
echo "train exit $? $(( $(date +%s) - t0 )) s"
for run in off join data:auto data:siphash; do
  mode=${run%%:*} mac=${run#*:}; [ "$mac" = "$run" ] && mac=auto
  DPA_LOG=info DPA_AUTH=$mode DPA_DATA_MAC=$mac timeout 50 python3 -m dpa.bench -n 4 --device cuda --sizes 4KiB,64MiB \
    --iterations 20 --backends dpa --json $R/bench-auth-$mode-$mac.json > $R/bench-auth-$mode-$mac.txt 2>&1
  echo "bench DPA_AUTH=$mode DPA_DATA_MAC=$mac exit $? $(( $(date +%s) - t0 )) s"
  grep -o -m1 "data MAC [a-z0-9-]*" $R/bench-auth-$mode-$mac.txt
  grep -E "^ +[0-9]+ +[0-9]+ +dpa" $R/bench-auth-$mode-$mac.txt
done
