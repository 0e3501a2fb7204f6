#!/bin/sh
# Static per-warp counts of the fp32 GDN commit path (the fused agent's path inside the stream
# kernel, gdn_stream_agent<gdnpol<16>, Branch = false), HEAD c5cdb09 vs gdn_commit_fast.patch.
# 1. nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -cubin -Xptxas -v k_gdn.cu -o k.cubin
# 2. cuobjdump -sass k.cubin > k.sass; ../stream16_latency_tools/ann.py k.sass <stream kernel name> > X.ann
# 3. the line ranges below were read off the listings by hand (they move with any code change).
C=$(dirname $0)/classes.py
H=${1:-gdnc_stream.ann}; P=${2:-gdnc_p3_s0.ann}
echo "HEAD fold step (2038-2065, 2195-2386, 2391-2567):"; python3 $C $H 2038-2065 2195-2386 2391-2567
echo "HEAD commit setup 627-1170 (upper bound), warp-0 factors 1171-1289, normalise 1290-1402, after fold 2568-3246:"
for r in 627-1170 1171-1289 1290-1402 2568-3246; do python3 $C $H $r; done
echo "patch fold step, no-rescale loop (2758-3082):"; python3 $C $P 2758-3082
echo "patch fold_scalars (warp 0, once; 2033-2296):"; python3 $C $P 2033-2296
