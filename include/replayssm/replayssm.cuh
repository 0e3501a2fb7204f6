/// @file replayssm.cuh
/// @brief Umbrella header: the whole public API of ReplaySSM.
///
/// ReplaySSM keeps the recurrent state of SSM layers as a checkpoint plus a buffer of recent
/// inputs: decode steps compute outputs by replaying the buffer against the checkpoint and write
/// no state; the buffer is committed into the checkpoint every K steps.
#pragma once

#include <replayssm/block.cuh>
#include <replayssm/cache.cuh>
#include <replayssm/gated_deltanet.cuh>
#include <replayssm/mamba2.cuh>
#include <replayssm/policy.cuh>
#include <replayssm/reference.hpp>
#include <replayssm/status.cuh>

/// Major version of the library (see @ref replayssm::version_string).
#define REPLAYSSM_VERSION_MAJOR 0
/// Minor version of the library.
#define REPLAYSSM_VERSION_MINOR 1
/// Patch version of the library.
#define REPLAYSSM_VERSION_PATCH 0

namespace replayssm {
/// @brief The library version, "major.minor.patch".
inline const char* version_string() { return "0.1.0"; }
}  // namespace replayssm
