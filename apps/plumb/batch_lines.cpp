#include "batch_lines.h"

#include <cstdint>
#include <set>

#include "plumb/tokenizer/chat.h"
#include "plumb/util/error.h"

namespace plumb::cli {
namespace {

using nlohmann::json;

template <class T>
T field(const json& line, const char* name, T fallback) {
  const auto it = line.find(name);
  if (it == line.end()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail("field '{}' has the wrong type ({})", name, it->type_name());
  }
}

// An integer field in [lo, hi]. Read wide: nlohmann would truncate 2^32 + 3 into an int (3) and
// wrap -1 into an unsigned seed, silently changing the request.
std::int64_t int_field(const json& line, const char* name, std::int64_t lo, std::int64_t hi, std::int64_t fallback) {
  const auto it = line.find(name);
  if (it == line.end()) return fallback;
  if (!it->is_number_integer()) fail("field '{}' must be an integer, got {}", name, it->type_name());
  // JSON's non-negative integers are unsigned to nlohmann (0 too): compare those as unsigned.
  const bool out_of_range = it->is_number_unsigned()
                                ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi) ||
                                      (lo > 0 && it->get<std::uint64_t>() < static_cast<std::uint64_t>(lo))
                                : it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi;
  if (out_of_range) fail("field '{}' must be in [{}, {}], got {}", name, lo, hi, it->dump());
  return it->get<std::int64_t>();
}

ChatMessage::Role parse_role(const std::string& role) {
  if (role == "system") return ChatMessage::Role::kSystem;
  if (role == "user") return ChatMessage::Role::kUser;
  if (role == "assistant") return ChatMessage::Role::kAssistant;
  fail("messages: unknown role '{}' (expected system, user or assistant)", role);
}

std::vector<std::uint32_t> prompt_tokens(const json& line, const Tokenizer& tok) {
  const int given = static_cast<int>(line.contains("prompt")) + static_cast<int>(line.contains("prompt_ids")) +
                    static_cast<int>(line.contains("messages"));
  if (given != 1) fail("give exactly one of 'prompt', 'prompt_ids' and 'messages'");
  if (line.contains("prompt_ids")) {
    const auto ids = field<std::vector<std::int64_t>>(line, "prompt_ids", {});
    std::vector<std::uint32_t> out;
    for (std::int64_t id : ids) {
      if (id < 0 || id > 0xffffffffll) fail("prompt_ids: {} is not a token id", id);
      out.push_back(static_cast<std::uint32_t>(id));
    }
    return out;
  }
  if (line.contains("prompt")) {  // BOS + the raw text, as `plumb run --prompt` feeds it
    const std::string text = field<std::string>(line, "prompt", "");
    return tok.encode(text, tok.bos_id().has_value());
  }
  const json& msgs = line.at("messages");
  if (!msgs.is_array() || msgs.empty()) fail("'messages' must be a non-empty array");
  std::vector<ChatMessage> messages;
  for (const json& m : msgs) {
    if (!m.is_object()) fail("messages: every entry must be an object with 'role' and 'content'");
    messages.push_back({parse_role(field<std::string>(m, "role", "")), field<std::string>(m, "content", "")});
  }
  return encode_chat(tok, messages, field<bool>(line, "thinking", false) ? ChatMode::kThinking : ChatMode::kChat);
}

SamplingParams sampling(const json& line, SamplingParams p) {
  bool asks_to_sample = false;
  for (const char* name : {"temperature", "top_k", "top_p", "min_p"}) asks_to_sample |= line.contains(name);
  p.temperature = field<float>(line, "temperature", p.temperature);
  p.top_k = static_cast<int>(int_field(line, "top_k", 0, INT32_MAX, p.top_k));
  p.top_p = field<float>(line, "top_p", p.top_p);
  p.min_p = field<float>(line, "min_p", p.min_p);
  p.repetition_penalty = field<float>(line, "repetition_penalty", p.repetition_penalty);
  p.presence_penalty = field<float>(line, "presence_penalty", p.presence_penalty);
  p.frequency_penalty = field<float>(line, "frequency_penalty", p.frequency_penalty);
  p.seed = static_cast<std::uint64_t>(int_field(line, "seed", 0, INT64_MAX, 0));
  p.greedy = field<bool>(line, "greedy", p.greedy && !asks_to_sample);
  return p;
}

}  // namespace

runtime::Request parse_batch_request(const json& line, const Tokenizer& tok, const SamplingParams& defaults) {
  if (!line.is_object()) fail("a request line must be a JSON object");
  static const std::set<std::string> known = {
      "id", "prompt", "prompt_ids", "messages", "thinking", "max_tokens", "greedy", "temperature", "top_k", "top_p",
      "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop", "stop_token_ids",
      "ignore_eos", "priority", "top_logprobs"};
  for (const auto& [key, value] : line.items())
    if (!known.count(key)) fail("unknown field '{}'", key);
  runtime::Request r;
  r.prompt = prompt_tokens(line, tok);
  r.max_tokens = int_field(line, "max_tokens", 1, INT64_MAX, 256);
  r.sampling = sampling(line, defaults);
  if (line.contains("stop"))
    r.stop_strings = line["stop"].is_string() ? std::vector<std::string>{line["stop"].get<std::string>()}
                                              : field<std::vector<std::string>>(line, "stop", {});
  for (const std::int64_t id : field<std::vector<std::int64_t>>(line, "stop_token_ids", {})) {
    if (id < 0 || id > UINT32_MAX) fail("stop_token_ids: {} is not a token id", id);
    r.stop_token_ids.push_back(static_cast<std::uint32_t>(id));
  }
  r.ignore_eos = field<bool>(line, "ignore_eos", false);
  r.priority = static_cast<int>(int_field(line, "priority", INT32_MIN, INT32_MAX, 0));
  r.top_logprobs = static_cast<int>(int_field(line, "top_logprobs", -1, 20, -1));
  return r;
}

nlohmann::ordered_json batch_result(const json& id, const runtime::RequestResult& r) {
  if (r.finish == runtime::FinishReason::kError) return batch_error(id, r.error);
  nlohmann::ordered_json out = {{"id", id},
                                {"text", r.text},
                                {"token_ids", r.tokens},
                                {"finish_reason", runtime::to_string(r.finish)},
                                {"usage",
                                 {{"prompt_tokens", r.prompt_tokens},
                                  {"completion_tokens", r.completion_tokens},
                                  {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
  if (!r.logprobs.empty()) {
    nlohmann::ordered_json lp = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < r.logprobs.size(); ++i) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const auto& t : r.top_logprobs[i]) top.push_back({{"token_id", t.token}, {"logprob", t.logprob}});
      lp.push_back({{"token_id", r.logprobs[i].token}, {"logprob", r.logprobs[i].logprob}, {"top", top}});
    }
    out["logprobs"] = lp;
  }
  return out;
}

nlohmann::ordered_json batch_error(const json& id, const std::string& error) {
  return {{"id", id}, {"error", error}, {"finish_reason", "error"}};
}

}  // namespace plumb::cli
