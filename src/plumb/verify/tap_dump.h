#pragma once
// A Taps sink that writes every tap to DIR/<name>.npy (f32, the tap's shape).
#include <string>

#include "plumb/model/taps.h"

namespace plumb {

// Creates DIR if needed; an unwritable DIR is a plumb::Error naming it.
Taps npy_tap_writer(const std::string& dir);

}  // namespace plumb
