// Smoke test for the ReplaySSM package: the public header compiles, a policy instantiates its
// kernels, and a launch with bad params is refused by the host checks (no GPU needed).
#include <cstdio>

#include <replayssm/replayssm.cuh>

using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16>;

int main() {
  replayssm::mamba2_params<policy> p;  // all null: must be refused, not launched
  p.headdim = 64;
  p.dstate = 128;
  const replayssm::result r = replayssm::decode_step(p, nullptr);
  std::printf("replayssm %s: empty params -> %s (%s)\n", replayssm::version_string(),
              replayssm::to_string(r.code), r.message);
  return r.ok() ? 1 : 0;
}
