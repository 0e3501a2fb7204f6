#!/bin/bash
# chain.sh SASS KERNEL_SUBSTRING: annotate one kernel (ann.py) and list, in order, its global loads,
# the waits on them (deps.py) and the first barrier: the block's dependent round trips.
T=$(dirname $0)/../stream16_latency_tools
K=$(grep "Function :" $1 | sed 's/.*Function : //' | grep -- "$2" | head -1)
python3 $T/ann.py $1 $K > /tmp/chain.ann
BAR=$(grep -n "BAR.SYNC" /tmp/chain.ann | head -1 | cut -d: -f1)
echo "first barrier at line $BAR"
grep -E "LDG|ATOMG" /tmp/chain.ann | awk -v b=$BAR '$1 <= b' | awk '{printf "%s ", $1; for (i=3;i<=NF;i++) if ($i ~ /LDG|ATOMG/) {print $i, $(i+1); break}}'
python3 $T/deps.py /tmp/chain.ann 1 $BAR | grep -v "LDS" | cut -c1-160
