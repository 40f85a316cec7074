// The data-path settings every rank of a communicator must share. Ranks whose LOOM_ALGO,
// LOOM_SOCKET_NSOCKS, LOOM_CHECK, ... differ would build different plans or links and wait
// on each other until the deadline, so at creation every rank takes rank 0's.
#pragma once

#include <string>

#include "base/status.h"
#include "bootstrap/bootstrap.h"

namespace loom {

struct CommConfig;

// Collective over the bootstrap: replaces the shared settings in *config with rank 0's;
// *differing gets the names of the variables whose value on this rank was not rank 0's,
// comma-separated (empty: none).
Status adoptRankZeroSettings(Bootstrap& bootstrap, CommConfig* config, std::string* differing);

}  // namespace loom
