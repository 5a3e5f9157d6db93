// plumb batch --model DIR --input requests.jsonl --output results.jsonl [engine flags]
// Offline batch generation through the serving engine: every valid line becomes a request, all
// run together (continuous batching), and the results are written in input order. A line that
// cannot run (bad JSON, a bad field, a request the engine refuses or one that fails) gets an
// error record; the others are unaffected. With --dp N (mpirun), replica d runs lines d, d + N,
// ... and rank 0 gathers every replica's records and writes them in input order.
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "batch_lines.h"
#include "commands.h"
#include "engine_flags.h"
#include "parallel_flags.h"
#include "plumb/dist/gather_strings.h"
#include "plumb/runtime/engine_model.h"
#include "plumb/util/error.h"
#include "plumb/util/progress.h"
#include "plumb/util/read_file.h"

namespace plumb::cli {

namespace {
struct BatchArgs {
  EngineFlags engine;
  ParallelFlags parallel;
  std::string input, output;
  bool quiet = false;
};

struct Line {
  std::size_t number = 0;  // in the input file, from 1
  std::string text;
  nlohmann::json id;   // null when the line has none or is not JSON
  std::string error;   // set: the line did not run
  runtime::RequestResult result;
};

// The non-blank lines of the input.
std::vector<Line> read_lines(const std::string& path) {
  std::ifstream in = open_regular_stream(path, "input file");
  std::vector<Line> lines;
  std::size_t number = 0;
  for (std::string s; read_line(in, s, fmt::format("{}:{}", path, number + 1));)
    if (++number, s.find_first_not_of(" \t\r") != std::string::npos) lines.push_back({number, s, {}, {}, {}});
  if (in.bad()) fail("{}: read error after {} lines", path, number);
  return lines;
}

// Submits every line; collects each request's events into its line. `finished` counts lines that
// are done (refused or ended); `changed` is signalled under `mu` when it grows.
void submit_all(runtime::Engine& engine, const Tokenizer& tokenizer, const SamplingParams& defaults,
                std::vector<Line>& lines, std::mutex& mu, std::condition_variable& changed, std::size_t& finished) {
  for (Line& l : lines) {
    try {
      const nlohmann::json j = nlohmann::json::parse(l.text);
      if (j.is_object() && j.contains("id")) l.id = j["id"];
      engine.submit(parse_batch_request(j, tokenizer, defaults), [&](const runtime::Event& e) {
        std::lock_guard lk(mu);
        l.result.add(e);
        if (!e.final) return;
        ++finished;
        changed.notify_one();
      });
    } catch (const std::exception& e) {
      std::lock_guard lk(mu);
      l.error = fmt::format("line {}: {}", l.number, e.what());
      ++finished;
    }
  }
}

std::string record_of(const Line& l) {
  // An error can quote the line, and the line need not be UTF-8: replace what is not.
  return (l.error.empty() ? batch_result(l.id, l.result) : batch_error(l.id, l.error))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The replicas' records in input order: line i is record i / dp of replica i % dp, which the
// replica's lead reports (only the leads run engines). Without a layout: this process's.
std::vector<std::string> gather_records(dist::Parallel* par, const std::vector<Line>& mine) {
  std::vector<std::string> records;
  for (const Line& l : mine) records.push_back(record_of(l));
  if (!par) return records;
  const auto all = dist::all_gather_strings(par->replica_leads(), records);
  const std::size_t dp = all.size();
  std::size_t total = 0;
  for (const auto& replica : all) total += replica.size();
  std::vector<std::string> out;
  for (std::size_t i = 0; i < total; ++i) out.push_back(all[i % dp][i / dp]);
  return out;
}

void write_results(const std::vector<std::string>& records, const std::string& path, const runtime::EngineStats& s,
                   int replicas) {
  std::ofstream out(path);
  if (!out) fail("{}: cannot open the output file", path);
  std::size_t errors = 0;
  for (const std::string& rec : records) {
    errors += nlohmann::json::parse(rec).contains("error");
    out << rec << '\n';
  }
  if (!out.flush()) fail("{}: write failed", path);
  std::fprintf(stderr, "batch: %zu requests (%zu errors), %lld prompt + %lld generated tokens, %lld steps, %lld preemptions%s -> %s\n",
               records.size(), errors, static_cast<long long>(s.prompt_tokens_total),
               static_cast<long long>(s.generation_tokens_total), static_cast<long long>(s.steps_total),
               static_cast<long long>(s.preemptions_total), replicas > 1 ? " (replica 0's engine)" : "", path.c_str());
}

int run(BatchArgs& a) {
  a.engine.parallel = join_layout(a.parallel);
  dist::Parallel* par = a.engine.parallel.get();
  const bool writer = writes_output(par), quiet = a.quiet || !writer;
  std::vector<Line> lines = read_lines(a.input);
  if (par && par->layout().dp > 1) {  // this replica's lines
    std::vector<Line> mine;
    for (std::size_t i = par->dp_rank(); i < lines.size(); i += static_cast<std::size_t>(par->layout().dp))
      mine.push_back(std::move(lines[i]));
    lines = std::move(mine);
  }
  if (writer && !std::ofstream(a.output)) fail("{}: cannot open the output file", a.output);  // fail before loading
  if (follow_model_group(a.engine)) return 0;
  const StartedEngine started = start_engine(a.engine, quiet);
  const auto& tokenizer = started.tokenizer;
  const auto& engine = started.engine;

  std::mutex mu;
  std::condition_variable changed;
  std::size_t finished = 0;
  submit_all(*engine, *tokenizer, sampling_defaults_for(a.engine.model), lines, mu, changed, finished);
  Progress progress("batch", lines.size(), !quiet);
  progress.count_in("requests");
  for (std::size_t shown = 0; shown < lines.size();) {
    std::unique_lock lk(mu);
    changed.wait_for(lk, std::chrono::milliseconds(200), [&] { return finished > shown; });
    progress.advance(finished - shown);
    shown = finished;
  }
  progress.finish();
  engine->shutdown();
  const std::vector<std::string> records = gather_records(par, lines);
  if (writer) write_results(records, a.output, engine->stats(), par ? par->layout().dp : 1);
  return 0;
}
}  // namespace

Runner register_batch(CLI::App& app) {
  auto* cmd = app.add_subcommand("batch", "Run a JSONL file of requests through the serving engine");
  auto a = std::make_shared<BatchArgs>();
  add_engine_flags(*cmd, a->engine);
  add_parallel_flags(*cmd, a->parallel);
  cmd->add_option("--input", a->input, "requests, one JSON object per line")->required();
  cmd->add_option("--output", a->output, "results, one JSON object per input line, in input order")->required();
  cmd->add_flag("--quiet", a->quiet, "no memory table and no progress bar on stderr");
  return [a] { return run(*a); };
}

}  // namespace plumb::cli
