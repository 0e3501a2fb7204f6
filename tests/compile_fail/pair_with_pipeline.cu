// expect: the pipelined kernels (PipelineStages >= 2) stage fp32 state only
#include <replayssm/replayssm.cuh>
replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16,
                         replayssm::precision::fp32_bf16, 64, 256, 2>
    policy;
