// Smoke test for the ReplaySSM package: the public header compiles and links (no GPU needed).
#include <cstdio>

#include <replayssm/replayssm.cuh>

int main() {
  std::printf("replayssm %s\n", replayssm::version_string());
  return 0;
}
