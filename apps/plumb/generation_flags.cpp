#include "generation_flags.h"

#include "commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "plumb/runtime/self_check.h"
#include "plumb/util/error.h"

namespace plumb::cli {
namespace {

constexpr std::string_view kSelfCheckPrompt = "In the beginning";
constexpr int kSelfCheckTokens = 8;

// generation_config.json's defaults, overridden by the flags that were given. A temperature,
// top-k, top-p or min-p flag asks for sampling even when the model's default is greedy.
SamplingParams resolve_sampling(const GenerationFlags& f) {
  SamplingParams p = sampling_defaults_for(f.engine.model);
  const SamplingParams& v = f.values;
  if (f.temperature->count()) p.temperature = v.temperature;
  if (f.top_k->count()) p.top_k = v.top_k;
  if (f.top_p->count()) p.top_p = v.top_p;
  if (f.min_p->count()) p.min_p = v.min_p;
  if (f.repetition_penalty->count()) p.repetition_penalty = v.repetition_penalty;
  if (f.presence_penalty->count()) p.presence_penalty = v.presence_penalty;
  if (f.frequency_penalty->count()) p.frequency_penalty = v.frequency_penalty;
  const bool asks_to_sample = f.temperature->count() || f.top_k->count() || f.top_p->count() || f.min_p->count();
  p.greedy = f.greedy || (p.greedy && !asks_to_sample);
  p.seed = f.seed->count() ? v.seed : std::random_device{}();
  validate(p);
  return p;
}

// --stop values may spell a newline or tab as \n or \t (a shell flag cannot easily hold one);
// \\ is a backslash.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char next = i + 1 < s.size() ? s[i + 1] : '\0';
    if (s[i] == '\\' && (next == 'n' || next == 't' || next == '\\')) {
      out += next == 'n' ? '\n' : next == 't' ? '\t' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) {
        long long v = 0;
        if (!CLI::detail::lexical_cast(text, v) || v >= min) return std::string();
        return fmt::format("must be at least {}, got {}", min, text);
      },
      fmt::format("INT >= {}", min));
}

CLI::Validator seconds(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || v > 0 || (zero_allowed && v == 0)) return std::string();
        return fmt::format("must be {} seconds, got {}", zero_allowed ? "0 or more" : "a positive number of", text);
      },
      zero_allowed ? "SECONDS >= 0" : "SECONDS > 0");
}

CLI::Validator thread_count() {
  const long long hardware = std::max(1u, std::thread::hardware_concurrency());
  return CLI::Validator(
      [hardware](std::string& text) {
        long long v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return std::string();
        if (v < 0) return fmt::format("must be at least 0 (0: one per hardware thread), got {}", text);
        if (v > hardware)
          return fmt::format("{} is more than this machine's {} hardware threads (0 uses all of them)", text, hardware);
        return std::string();
      },
      fmt::format("INT in [0, {}]", hardware));
}

void check_fits_context(std::int64_t tokens, const ModelConfig& cfg, std::string_view what) {
  if (tokens > cfg.max_position_embeddings)
    fail("{} = {} tokens exceed the model's context of {} tokens (max_position_embeddings)", what, tokens,
         cfg.max_position_embeddings);
}

void add_generation_flags(CLI::App& cmd, GenerationFlags& f) {
  add_engine_flags(cmd, f.engine);
  cmd.add_option("--max-new-tokens", f.max_new_tokens, "most tokens to generate (per turn in chat)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_flag("--greedy", f.greedy, "argmax decoding (default: the model's generation_config.json)");
  f.temperature = cmd.add_option("--temperature", f.values.temperature, "divide the logits by T (0: greedy)");
  f.top_k = cmd.add_option("--top-k", f.values.top_k, "keep the K most likely tokens (0: off)");
  f.top_p = cmd.add_option("--top-p", f.values.top_p, "keep the most likely tokens up to mass P (1: off)");
  f.min_p = cmd.add_option("--min-p", f.values.min_p, "drop tokens below P times the top probability (0: off)");
  f.repetition_penalty = cmd.add_option("--repetition-penalty", f.values.repetition_penalty,
                                        "HF repetition penalty on prompt and output tokens (1: off)");
  f.presence_penalty = cmd.add_option("--presence-penalty", f.values.presence_penalty,
                                      "subtracted once from the logit of every generated token (0: off)");
  f.frequency_penalty = cmd.add_option("--frequency-penalty", f.values.frequency_penalty,
                                       "subtracted per occurrence from the logit of generated tokens (0: off)");
  f.seed = cmd.add_option("--seed", f.values.seed, "sampling seed (default: random, printed in the stats line)")
               ->check(at_least(0));
  cmd.add_option("--stop", f.stops, "stop before this text (repeatable; \\n and \\t for newline and tab)");
  cmd.add_flag("--self-check", f.self_check, "generate a few tokens of a fixed prompt and check them before starting");
}

Generator start_generator(const GenerationFlags& f) {
  Generator g{load_model_config(f.engine.model), {}, {}};
  g.defaults.sampling = resolve_sampling(f);
  g.defaults.max_tokens = f.max_new_tokens;
  for (const std::string& stop : f.stops) g.defaults.stop_strings.push_back(unescape(stop));
  g.started = start_engine(f.engine, /*quiet=*/true);
  return g;
}

void report_self_check(Generator& g) {
  std::vector<TokenId> prompt = g.tokenizer().encode(kSelfCheckPrompt);
  prompt.insert(prompt.begin(), static_cast<TokenId>(g.config.bos_token_id));
  const runtime::SelfCheckResult r = runtime::self_check(*g.started.engine, prompt, kSelfCheckTokens);
  std::fprintf(stderr, "self-check: ok: \"%s\" -> \"%s\" (%d tokens, decode vs prefill logprobs within %.2g, %.2f s)\n",
               std::string(kSelfCheckPrompt).c_str(), g.tokenizer().decode(r.tokens).c_str(), kSelfCheckTokens,
               r.max_logprob_diff, r.seconds);
}

void print_now(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

Completion complete_streamed(Generator& g, std::vector<TokenId> prompt) {
  using Clock = std::chrono::steady_clock;
  runtime::Request request = g.defaults;
  request.prompt = std::move(prompt);
  const auto t0 = Clock::now();
  Clock::time_point first = t0;
  bool got_first = false;
  Completion c;
  c.result = runtime::generate_one(*g.started.engine, std::move(request), [&](const runtime::Event& e) {
    if (!got_first && !e.tokens.empty()) {
      first = Clock::now();
      got_first = true;
    }
    print_now(e.text);
  });
  const auto t1 = Clock::now();
  if (c.result.finish == runtime::FinishReason::kError) fail("{}", c.result.error);
  c.prefill_seconds = std::chrono::duration<double>((got_first ? first : t1) - t0).count();
  c.decode_seconds = std::chrono::duration<double>(t1 - (got_first ? first : t1)).count();
  return c;
}

std::string stats_line(const Completion& c, const Generator& g) {
  const runtime::RequestResult& r = c.result;
  const bool eos = !r.tokens.empty() && static_cast<std::int64_t>(r.tokens.back()) == g.config.eos_token_id;
  const char* reason = r.finish == runtime::FinishReason::kLength ? "max tokens" : eos ? "eos" : "stop string";
  auto rate = [](double n, double s) { return s > 0 ? fmt::format("{:.1f} tok/s", n / s) : std::string("-"); };
  const auto decode_steps = std::max<std::int64_t>(0, static_cast<std::int64_t>(r.tokens.size()) - 1);
  const SamplingParams& s = g.defaults.sampling;
  const bool sampled = !(s.greedy || s.temperature == 0.0f);
  return fmt::format("{} prompt tokens ({} cached), {} generated ({}); prefill {} ({:.3f} s), decode {} ({:.3f} s){}",
                     r.prompt_tokens, r.cached_prompt_tokens, r.tokens.size(), reason,
                     rate(static_cast<double>(r.prompt_tokens - r.cached_prompt_tokens), c.prefill_seconds),
                     c.prefill_seconds, rate(static_cast<double>(decode_steps), c.decode_seconds), c.decode_seconds,
                     sampled ? fmt::format(", seed {}", s.seed) : std::string(", greedy"));
}

}  // namespace plumb::cli
