// expect: DState must be 16, 32, 64 or 128
#include <replayssm/replayssm.cuh>
replayssm::rules::mamba2<64, 96> rule;
