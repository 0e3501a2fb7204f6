#!/bin/sh
# Per-warp executed-instruction estimate of the commit branch of the fp32 stream kernel at HEAD 580a643
# (listing_head_fp32_stream_B0.txt, regenerate with ../stream16_latency_tools/ann.py). Line ranges were read off
# the listing by hand: 1-25 stream run() prefix; 538-971 fused preamble (645-676 B/C, tid < 128; 737-741
# softplus overflow path, untaken); 1323-1347 scale_window loop body (1329-1343 tid < 64); 1348-1391 rescale;
# 1392-1440 fold loop body (x16); 1441-1554 contract + stores; 1555-1619 output (tid < 64).
L=${1:-listing_head_fp32_stream_B0.txt}; C=../stream16_latency_tools/count.py
pre=$(python3 $C $L 25); fa=$(python3 $C $L 971 1-537 737-741); fb=$(python3 $C $L 971 1-537 645-676 737-741)
si=$(python3 $C $L 1347 1-1323); so=$(python3 $C $L 1347 1-1323 1329-1343); mid=$(python3 $C $L 1391 1-1347)
fold=$(python3 $C $L 1440 1-1391); post=$(python3 $C $L 1554 1-1440 1544-1551)
ta=$(python3 $C $L 1619 1-1554 1589-1591); tb=$(python3 $C $L 1558 1-1554)
python3 -c "
pre,fa,fb,si,so,mid,fold,post,ta,tb=$pre,$fa,$fb,$si,$so,$mid,$fold,$post,$ta,$tb
w01=pre+fa+16*si+mid+16*fold+post+ta; w23=pre+fa+16*so+mid+16*fold+post+tb; w47=pre+fb+16*so+mid+16*fold+post+tb
print('warps 0-1 %d, 2-3 %d, 4-7 %d, block %d; fold %d, scale_window %d, preamble %d' % (w01,w23,w47,2*w01+2*w23+4*w47,128*fold,32*si+96*so,4*fa+4*fb+8*pre))"
