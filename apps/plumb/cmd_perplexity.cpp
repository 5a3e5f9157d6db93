// plumb perplexity --model DIR --file TEXT [--context N] [--batch B] [engine flags]
// Perplexity of a text file under the definition of runtime/perplexity.h, with a progress bar.
// Each window is one engine request asking for its prompt logprobs; --batch windows are in the
// engine at once, which packs them into its steps. Under a layout (mpirun, --dp/--tp/--ep) each
// replica's lead runs the windows of its replica (--dp N: window i on replica i mod N) while the
// other ranks of its model group follow its model calls; the scores are gathered in window order,
// so the result is bitwise one process's, and rank 0 prints it.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "commands.h"
#include "generation_flags.h"
#include "engine_flags.h"
#include "parallel_flags.h"
#include "plumb/dist/gather_strings.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/runtime/perplexity.h"
#include "plumb/tokenizer/tokenizer.h"
#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb::cli {

namespace {
using Clock = std::chrono::steady_clock;

struct PerplexityArgs {
  EngineFlags engine;
  ParallelFlags parallel;
  std::string file;
  int64_t context = 256, batch = 1;
  bool no_progress = false;
};

// The text is encoded whole; 1 GiB is far more than a perplexity run can score in reasonable time.
constexpr std::uint64_t kMaxTextBytes = 1ull << 30;

// Windows and tokens done, rate and ETA on stderr: redrawn in place on a terminal, one line per
// 10% otherwise (logs stay short). plumb::Progress counts bytes, so it does not fit here.
class TokenProgress {
 public:
  TokenProgress(int64_t tokens, int64_t windows, bool enabled)
      : tokens_(tokens), windows_(windows), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(const PerplexityResult& r) {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(Clock::now() - start_).count();
    const double rate = s > 0 ? static_cast<double>(r.tokens) / s : 0;
    const int pct = static_cast<int>(100 * r.tokens / tokens_);
    const bool done = r.tokens == tokens_;
    if (!tty_ && !done && pct / 10 == logged_pct_ / 10) return;
    logged_pct_ = pct;
    const int left = rate > 0 ? static_cast<int>(static_cast<double>(tokens_ - r.tokens) / rate) : 0;
    constexpr int kWidth = 30;
    const int filled = pct * kWidth / 100;
    const std::string line = fmt::format(
        "perplexity [{}{}] {:3d}% {}/{} windows, {}/{} tokens, {:.0f} tok/s, ETA {}:{:02d}", std::string(filled, '#'),
        std::string(kWidth - filled, '.'), pct, r.windows, windows_, r.tokens, tokens_, rate, left / 60, left % 60);
    std::fprintf(stderr, tty_ ? "\r%s%s" : "%s%s", line.c_str(), tty_ && !done ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  int64_t tokens_, windows_;
  bool enabled_, tty_;
  int logged_pct_ = -10;
  Clock::time_point start_ = Clock::now();
};

// The prompt logprobs of each input, all of them in the engine at once (each request ends after
// one sampled token, which is not used).
std::vector<std::vector<float>> score_windows(runtime::Engine& engine, std::span<const std::vector<TokenId>> inputs) {
  std::vector<std::vector<float>> out(inputs.size());
  std::vector<std::string> errors(inputs.size());
  std::mutex mu;
  std::condition_variable done;
  std::size_t finished = 0, submitted = 0;
  std::vector<runtime::RequestId> ids;
  try {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      runtime::Request r;
      r.prompt = inputs[i];
      r.sampling.greedy = true;
      r.max_tokens = 1;
      r.prompt_logprobs = true;
      ids.push_back(engine.submit(std::move(r), [&, i](const runtime::Event& e) {  // on the engine thread
        std::lock_guard lk(mu);
        out[i].insert(out[i].end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
        if (!e.final) return;
        if (e.finish == runtime::FinishReason::kError) errors[i] = e.error;
        ++finished;
        done.notify_one();
      }));
      ++submitted;
    }
  } catch (...) {  // a refused window: the ones already in the engine must end before `out` goes
    for (runtime::RequestId id : ids) engine.cancel(id);
    std::unique_lock lk(mu);
    done.wait(lk, [&] { return finished == submitted; });
    throw;
  }
  std::unique_lock lk(mu);
  done.wait(lk, [&] { return finished == submitted; });
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!errors[i].empty()) fail("window {} of this batch: {}", i, errors[i]);
  return out;
}

// score_windows on this replica's share of the batch (window i on replica i mod dp), then every
// replica's scores gathered back into window order: each window's scores are the ones one process
// computes, whichever replica ran it.
std::vector<std::vector<float>> score_on_replicas(runtime::Engine& engine, std::span<const std::vector<TokenId>> inputs,
                                                  dist::Parallel& par) {
  const auto dp = static_cast<std::size_t>(par.layout().dp), d = static_cast<std::size_t>(par.dp_rank());
  std::vector<std::vector<TokenId>> mine;
  for (std::size_t i = d; i < inputs.size(); i += dp) mine.push_back(inputs[i]);
  std::vector<std::string> packed;
  for (const std::vector<float>& v : score_windows(engine, mine))
    packed.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  const auto all = dist::all_gather_strings(par.replica_leads(), packed);  // only the leads run engines
  std::vector<std::vector<float>> out(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& bytes = all[i % dp][i / dp];
    out[i].resize(bytes.size() / sizeof(float));
    std::memcpy(out[i].data(), bytes.data(), bytes.size());
  }
  return out;
}

int run_perplexity(PerplexityArgs& a) {
  a.engine.parallel = join_layout(a.parallel);
  dist::Parallel* par = a.engine.parallel.get();
  const bool writer = writes_output(par);
  const Tokenizer tokenizer = Tokenizer::load(a.engine.model);
  const std::string text = read_regular_file(a.file, kMaxTextBytes, "text file");
  const std::vector<TokenId> ids = tokenizer.encode(text);
  if (ids.empty()) fail("{}: no tokens to score (the file is empty)", a.file);
  const ModelConfig config = load_model_config(a.engine.model);
  check_fits_context(a.context + 1, config, "--context + the BOS of each window");
  if (follow_model_group(a.engine)) return 0;
  const StartedEngine started = start_engine(a.engine, /*quiet=*/true);

  PerplexityOptions o{a.context, static_cast<TokenId>(config.bos_token_id), a.batch};
  const auto n = static_cast<int64_t>(ids.size());
  TokenProgress progress(n, window_count(n, a.context), !a.no_progress && writer);
  const auto t0 = Clock::now();
  const PerplexityResult r = perplexity(
      ids, o,
      [&](std::span<const std::vector<TokenId>> inputs) {
        return par ? score_on_replicas(*started.engine, inputs, *par) : score_windows(*started.engine, inputs);
      },
      [&](const PerplexityResult& so_far) { progress.update(so_far); });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!writer) return 0;

  std::printf("perplexity  %.5f\n", r.ppl());
  std::printf("nll         %.3f nats (%.5f per token)\n", r.nll, r.nll / static_cast<double>(r.tokens));
  std::printf("tokens      %lld in %lld windows of %lld (each scored as BOS + window)\n",
              static_cast<long long>(r.tokens), static_cast<long long>(r.windows), static_cast<long long>(a.context));
  std::printf("time        %.1f s (%.0f tok/s, %s numerics)\n", s, static_cast<double>(r.tokens) / s,
              a.engine.numerics.c_str());
  return 0;
}
}  // namespace

Runner register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text file (non-overlapping windows, each after BOS)");
  auto a = std::make_shared<PerplexityArgs>();
  add_engine_flags(*cmd, a->engine);
  add_parallel_flags(*cmd, a->parallel);
  cmd->add_option("--file", a->file, "UTF-8 text file, encoded whole with no BOS/EOS")->required();
  cmd->add_option("--context", a->context, "tokens per window")->check(at_least(1))->capture_default_str();
  cmd->add_option("--batch", a->batch, "windows in the engine at once (it packs them into its steps)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_flag("--no-progress", a->no_progress, "no progress bar");
  return [a] { return run_perplexity(*a); };
}

}  // namespace plumb::cli
