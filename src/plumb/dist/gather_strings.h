#pragma once
// Strings across a group (a command's per-replica results for rank 0 to write).
#include <span>
#include <string>
#include <vector>

#include "plumb/dist/communicator.h"

namespace plumb::dist {

// Every rank's list of strings, by rank (each rank may send a different number). Collective.
std::vector<std::vector<std::string>> all_gather_strings(Communicator& c, std::span<const std::string> mine);

}  // namespace plumb::dist
