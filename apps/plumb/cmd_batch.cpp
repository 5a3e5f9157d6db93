// plumb batch --model DIR --input requests.jsonl --output results.jsonl [engine flags]
// Offline batch generation through the serving engine: every valid line becomes a request, all
// run together (continuous batching), and the results are written in input order. A line that
// cannot run (bad JSON, a bad field, a request the engine refuses or one that fails) gets an
// error record; the others are unaffected.
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "batch_lines.h"
#include "commands.h"
#include "engine_flags.h"
#include "plumb/runtime/engine_model.h"
#include "plumb/util/error.h"
#include "plumb/util/progress.h"

namespace plumb::cli {

namespace {
struct BatchArgs {
  EngineFlags engine;
  std::string input, output;
  bool quiet = false;
};

struct Line {
  nlohmann::json id;  // null when the line has none or is not JSON
  std::string error;  // set: the line did not run (or failed)
  runtime::RequestResult result;
  bool done = false;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open the input file", path);
  std::vector<std::string> lines;
  for (std::string s; std::getline(in, s);)
    if (s.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(s);
  return lines;
}

int run(const BatchArgs& a) {
  const std::vector<std::string> text = read_lines(a.input);
  std::ofstream out(a.output);
  if (!out) fail("{}: cannot open the output file", a.output);
  const runtime::EngineOptions options = engine_options(a.engine);
  const auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(a.engine.model));
  auto model = runtime::load_engine_model(a.engine.model, run_options(a.engine));
  if (!a.quiet) std::fputs(runtime::engine_memory_table(*model, options).c_str(), stderr);
  const SamplingParams defaults = sampling_defaults_for(a.engine.model);
  auto engine = runtime::start_engine(std::move(model), tokenizer, options);

  std::vector<Line> lines(text.size());
  std::mutex mu;
  std::condition_variable changed;
  std::size_t finished = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    Line& l = lines[i];
    try {
      const nlohmann::json j = nlohmann::json::parse(text[i]);
      if (j.is_object() && j.contains("id")) l.id = j["id"];
      engine->submit(parse_batch_request(j, *tokenizer, defaults), [&, i](const runtime::Event& e) {
        std::lock_guard lk(mu);
        lines[i].result.add(e);
        if (!e.final) return;
        lines[i].done = true;
        ++finished;
        changed.notify_one();
      });
    } catch (const std::exception& e) {
      std::lock_guard lk(mu);
      l.error = fmt::format("line {}: {}", i + 1, e.what());
      l.done = true;
      ++finished;
    }
  }
  Progress progress("batch", text.size(), !a.quiet);
  progress.count_in("requests");
  for (std::size_t shown = 0;;) {
    std::unique_lock lk(mu);
    changed.wait_for(lk, std::chrono::milliseconds(200), [&] { return finished > shown; });
    progress.advance(finished - shown);
    shown = finished;
    if (shown == text.size()) break;
  }
  progress.finish();
  engine->shutdown();

  std::size_t errors = 0;
  for (const Line& l : lines) {
    const nlohmann::ordered_json rec = l.error.empty() ? batch_result(l.id, l.result) : batch_error(l.id, l.error);
    errors += rec.contains("error");
    out << rec.dump() << '\n';
  }
  if (!out.flush()) fail("{}: write failed", a.output);
  const runtime::EngineStats s = engine->stats();
  std::fprintf(stderr, "batch: %zu requests (%zu errors), %lld prompt + %lld generated tokens, %lld steps, %lld preemptions -> %s\n",
               text.size(), errors, static_cast<long long>(s.prompt_tokens_total),
               static_cast<long long>(s.generation_tokens_total), static_cast<long long>(s.steps_total),
               static_cast<long long>(s.preemptions_total), a.output.c_str());
  return 0;
}
}  // namespace

Runner register_batch(CLI::App& app) {
  auto* cmd = app.add_subcommand("batch", "Run a JSONL file of requests through the serving engine");
  auto a = std::make_shared<BatchArgs>();
  add_engine_flags(*cmd, a->engine);
  cmd->add_option("--input", a->input, "requests, one JSON object per line")->required();
  cmd->add_option("--output", a->output, "results, one JSON object per input line, in input order")->required();
  cmd->add_flag("--quiet", a->quiet, "no memory table and no progress bar on stderr");
  return [a] { return run(*a); };
}

}  // namespace plumb::cli
