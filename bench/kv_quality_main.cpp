// plumb_kv_quality: what each KV storage format costs (issue #15 item 7; verify/kv_quality.h).
// One long input (a text file, tokenized with BOS, or seeded random ids) is prefilled once per
// format (f32, bf16, fp8 = fp8 entries + fp4 indexer keys); at each --contexts value the logits
// of the last position and three earlier ones are compared with f32 storage (cosine, max abs
// diff), and for a text the perplexity of the first `context` tokens is reported. Writes JSON
// (--json) and prints a Markdown table (also to --markdown).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "plumb/model/model.h"
#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"
#include "plumb/verify/kv_quality.h"

using namespace plumb;

namespace {

std::vector<std::int64_t> parse_contexts(const std::string& s) {
  std::vector<std::int64_t> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
  return v;
}

std::vector<TokenId> input_ids(const std::string& model, const std::string& text, std::int64_t random, std::uint64_t seed,
                               std::int64_t vocab) {
  if (!text.empty()) {
    std::ifstream in(text, std::ios::binary);
    if (!in) fail("--text {}: cannot read the file", text);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::vector<std::uint32_t> ids = Tokenizer::load(model).encode(buf.str(), true);
    return {ids.begin(), ids.end()};
  }
  std::mt19937_64 rng(seed);
  std::vector<TokenId> ids(static_cast<std::size_t>(random));
  for (TokenId& id : ids) id = static_cast<TokenId>(2 + rng() % static_cast<std::uint64_t>(vocab - 2));
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plumb_kv_quality: logits and perplexity under each KV storage format, against f32 storage"};
  std::string model, backend_name = "cpu", numerics = "reference", contexts = "4096,16384,65536", text, json_out, md_out;
  std::int64_t random_ids = 0, chunk = 512;
  std::uint64_t seed = 1;
  int threads = 0;
  app.add_option("--model", model, "checkpoint directory")->required();
  app.add_option("--backend", backend_name, "cpu, cuda or hip")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all)")->capture_default_str();
  app.add_option("--numerics", numerics, "reference or faithful")->capture_default_str();
  app.add_option("--contexts", contexts, "ascending contexts, comma-separated")->capture_default_str();
  app.add_option("--text", text, "a text file (tokenized with BOS; adds perplexity)");
  app.add_option("--random-ids", random_ids, "instead of --text: this many seeded random token ids");
  app.add_option("--seed", seed, "seed of --random-ids")->capture_default_str();
  app.add_option("--chunk", chunk, "tokens per forward")->capture_default_str();
  app.add_option("--json", json_out, "write the rows as JSON here");
  app.add_option("--markdown", md_out, "write the table here too");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<std::int64_t> ctx = parse_contexts(contexts);
    if (text.empty() == (random_ids == 0)) fail("give exactly one of --text FILE and --random-ids N");
    auto m = load_model(model, {backend_name, threads, parse_numerics(numerics)});
    std::vector<TokenId> ids = input_ids(model, text, random_ids, seed, m->config().vocab_size);
    if (!ctx.empty() && static_cast<std::int64_t>(ids.size()) > ctx.back()) ids.resize(static_cast<std::size_t>(ctx.back()));
    verify::KvQualityOptions o;
    o.contexts = ctx;
    o.chunk = chunk;
    o.perplexity = !text.empty();
    const std::vector<verify::KvQualityFormat> formats = verify::kv_quality_formats();
    const std::vector<verify::KvQualityRow> rows =
        verify::kv_quality(*m, ids, formats, o, [](const std::string& f, std::int64_t done, std::int64_t total) {
          std::fprintf(stderr, "\r%-5s %lld / %lld tokens", f.c_str(), static_cast<long long>(done),
                       static_cast<long long>(total));
          if (done == total) std::fputc('\n', stderr);
        });
    const std::string md = verify::kv_quality_markdown(rows);
    std::fputs(md.c_str(), stdout);
    if (!md_out.empty()) std::ofstream(md_out) << md;
    if (!json_out.empty()) {
      nlohmann::json j = {{"model", model},     {"backend", backend_name}, {"numerics", numerics},
                          {"input", text.empty() ? fmt::format("random ids (seed {})", seed) : text},
                          {"tokens", ids.size()}, {"chunk", chunk},        {"rows", verify::kv_quality_json(rows)}};
      std::ofstream(json_out) << j.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb_kv_quality: %s\n", e.what());
    return 2;
  }
  return 0;
}
