#include "plumb/model/numerics.h"

#include "plumb/util/error.h"

namespace plumb {

const char* numerics_name(Numerics n) { return n == Numerics::Reference ? "reference" : "faithful"; }

Numerics parse_numerics(const std::string& name) {
  if (name == "reference") return Numerics::Reference;
  if (name == "faithful") return Numerics::Faithful;
  fail("unknown numerics profile '{}' (expected reference or faithful)", name);
}

}  // namespace plumb
