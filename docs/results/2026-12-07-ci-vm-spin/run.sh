#!/bin/bash
# The 2-core CI VM: one rank, 1 engine and 1 switch thread over shared memory, 64 MiB, with the
# embedded switch sleeping (defaults) or spinning 200 us, alternately; Gloo in the same run.
# Run from the repository root after a build: PYTHONPATH=build/python.
export DPA_THREADS=1 DPA_SWITCH_THREADS=1 PYTHONPATH=${PYTHONPATH:-build/python}
for round in 1 2 3; do
  for variant in X=1 DPA_SWITCH_BUSY_POLL_US=200; do
    echo "-- $round $variant: $(env $variant timeout 180 /usr/bin/python3 -m dpa.bench -n 1 --sizes 64MiB \
      --iterations 10 --warmup 1 2>&1 | grep -E '^ +[0-9]+ +[0-9]+ +(dpa|gloo)' | tr -s ' ' | tr '\n' '|')"
  done
done
