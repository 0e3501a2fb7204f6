#include <replayssm/replayssm.cuh>
using namespace replayssm;
template <class pol> result f(const mamba2_params<pol>& p) { return decode_step(p, nullptr); }
#define P(T, L, K, PR) template result f(const mamba2_params<replay_policy<rules::mamba2<64, 128, T>, L, K, precision::PR>>&);
P(float,16,16,fp32) P(float,32,16,fp32) P(float,16,8,fp32) P(float,8,4,fp32) P(float,8,1,fp32) P(__nv_bfloat16,32,16,fp32)
P(__nv_bfloat16,16,16,bf16) P(__nv_bfloat16,16,16,fp32_bf16) P(__nv_bfloat16,16,16,fp32_fp8) P(__nv_bfloat16,16,16,int8) P(float,16,16,fp16)
