// expect: PipelineStages must be 0 (no pipeline) or 2 to 4
#include <replayssm/replayssm.cuh>
replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16, replayssm::precision::fp32,
                         64, 256, 1>
    policy;
