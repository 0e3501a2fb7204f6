// The bench's GDN policy (bench_decode.cu gdnpol<16>): fp32 state, bf16 inputs, K = L = 16.
#include <replayssm/replayssm.cuh>
using pol = replayssm::replay_policy<replayssm::rules::gated_deltanet<128, 128, __nv_bfloat16>, 16, 16>;
replayssm::result fd(const replayssm::gdn_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
replayssm::result fe(const replayssm::gdn_params<pol>& p) { return replayssm::eager_step(p, nullptr); }
