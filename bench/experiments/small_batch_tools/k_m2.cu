// The bench's Mamba-2 policy (bench_decode.cu m2pol<16>): fp32 state, bf16 inputs, K = L = 16.
#include <replayssm/replayssm.cuh>
using pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, __nv_bfloat16>, 16, 16>;
replayssm::result fd(const replayssm::mamba2_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
replayssm::result fe(const replayssm::mamba2_params<pol>& p) { return replayssm::eager_step(p, nullptr); }
