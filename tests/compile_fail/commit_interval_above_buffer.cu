// expect: the commit interval K must not exceed the buffer length L
#include <replayssm/replayssm.cuh>
replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 8, 16> policy;
