// What a launch does to each slot it visits.
#pragma once

namespace replayssm {
namespace detail {

enum class op : int {
  eager,        // read state, apply the step, write state, write output
  decode,       // replay: output from checkpoint + buffer, append; commit when the window fills
  flush,        // fold the buffered steps into the checkpoint, cursor -> 0
  materialize,  // checkpoint + buffer -> caller's state buffer (nothing else changes)
  load,         // caller's state -> checkpoint, cursor -> 0
};

}  // namespace detail
}  // namespace replayssm
