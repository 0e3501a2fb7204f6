// Smoke test for the ReplaySSM package: the public header compiles, a policy instantiates its
// kernels, a kernel of the consumer's own uses a block-level building block, and a launch with
// bad params is refused by the host checks (no GPU needed: nothing is launched).
#include <cstdio>
#include <replayssm/replayssm.cuh>

using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16>;
using block = replayssm::mamba2_decode_block<policy>;

__global__ void my_fused_step(const replayssm::mamba2_params<policy> p) {
  __shared__ typename block::shared_storage smem;
  const int per_row = p.nheads * block::tiles_per_head;
  for (int i = blockIdx.x; i < p.rows.batch * per_row; i += gridDim.x) {
    block{smem}.run(p, i / per_row, (i % per_row) / block::tiles_per_head,
                    i % block::tiles_per_head, replayssm::state_pool_ref{});
    __syncthreads();
  }
}

int main() {
  replayssm::mamba2_params<policy> p;  // all null: must be refused, not launched
  p.headdim = 64;
  p.dstate = 128;
  const replayssm::result r = replayssm::decode_step(p, nullptr);
  std::printf("replayssm %s: empty params -> %s (%s)\n", replayssm::version_string(),
              replayssm::to_string(r.code), r.message);
  (void)&my_fused_step;
  return r.ok() ? 1 : 0;
}
