// plumb_json_bench: the cost of one response_format mask() step (JsonConstraint: trie walk with
// the plain-text block inside strings) against a per-token scan of the whole vocabulary (every
// token tried on a copy of the matcher: what the constraint did before the trie), on typical
// states of a schema and a real tokenizer. A benchmark, not a test: it prints, asserts nothing
// about time, and checks only that both give the same mask.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "plumb/server/json_constraint.h"

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::vector<bool> scan(const plumb::server::JsonMatcher& state, const plumb::server::TokenTable& t) {
  std::vector<bool> allowed(t.bytes.size());
  for (std::size_t id = 0; id < t.bytes.size(); ++id) {
    if (t.bytes[id].empty()) continue;
    plumb::server::JsonMatcher trial = state;
    bool ok = true;
    for (char c : t.bytes[id])
      if (!(ok = trial.feed(static_cast<unsigned char>(c)))) break;
    allowed[id] = ok;
  }
  return allowed;
}

template <typename F>
double median_us(int reps, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
  return us[static_cast<std::size_t>(reps / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_json_bench: response_format mask() per step, trie walk vs per-token scan"};
  std::string tokenizer_path = PLUMB_JSON_BENCH_TOKENIZER;
  int reps = 15;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json or a model directory (default: DeepSeek-V3's, unpacked by the tests' CMake)");
  app.add_option("--reps", reps, "timed repetitions per state (the median is printed)")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);

  const auto t0 = Clock::now();
  const plumb::Tokenizer tokenizer = plumb::Tokenizer::load(tokenizer_path);
  const auto t1 = Clock::now();
  auto table = std::make_shared<const plumb::server::TokenTable>(tokenizer);
  const auto t2 = Clock::now();
  fmt::print("tokenizer {}: {} ids, load {:.0f} ms; token table + tries {:.0f} ms ({} + {} trie nodes, {} plain-text ids)\n",
             tokenizer_path, table->bytes.size(), std::chrono::duration<double, std::milli>(t1 - t0).count(),
             std::chrono::duration<double, std::milli>(t2 - t1).count(), table->trie.node_count(), table->not_plain_text.node_count(),
             table->plain_text.size());

  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
      "color": {"enum": ["red", "green", "blue"]}, "inner": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    "required": ["name", "age", "inner"]})");
  const std::pair<const char*, const char*> states[] = {
      {"start", ""},
      {"in a key", R"({")"},
      {"in a string", R"({"name":"In the beginning God created)"},
      {"in a number", R"({"name":"x","age":12)"},
      {"array start", R"({"name":"x","age":1,"tags":[)"},
      {"after a comma", R"({"name":"x","age":1,"tags":["a"],)"},
  };
  const std::size_t vocab = table->bytes.size();
  std::unique_ptr<bool[]> allowed(new bool[vocab]);
  fmt::print("{:<14} {:>9} {:>8} {:>14} {:>14} {:>14}\n", "state", "allowed", "budget", "trie us/step", "scan us/step", "speed-up");
  for (const auto& [name, prefix] : states) {
    plumb::server::JsonMatcher matcher(schema);
    for (const char* c = prefix; *c; ++c) matcher.feed(static_cast<unsigned char>(*c));
    // Unlimited, and tight: the shortest completion plus two tokens.
    for (const std::int64_t remaining : {std::int64_t{1'000'000}, static_cast<std::int64_t>(matcher.completion_size()) + 2}) {
      plumb::server::JsonConstraint constraint(matcher, table, false);
      const double trie_us = median_us(reps, [&] {
        std::fill_n(allowed.get(), vocab, true);
        constraint.mask({allowed.get(), vocab}, remaining);
      });
      std::vector<bool> scanned;
      const double scan_us = median_us(std::max(1, reps / 3), [&] { scanned = scan(matcher, *table); });
      std::size_t count = 0, mismatches = 0;
      for (std::size_t id = 0; id < vocab; ++id) {
        count += allowed[id];
        mismatches += remaining == 1'000'000 && allowed[id] != scanned[id];
      }
      fmt::print("{:<14} {:>9} {:>8} {:>14.1f} {:>14.1f} {:>13.1f}x{}\n", name, count, remaining == 1'000'000 ? "none" : std::to_string(remaining),
                 trie_us, scan_us, scan_us / trie_us, mismatches ? fmt::format("  MASKS DIFFER at {} ids", mismatches) : "");
    }
  }
  return 0;
}
