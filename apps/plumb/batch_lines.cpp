#include "batch_lines.h"

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
  p.top_k = field<int>(line, "top_k", p.top_k);
  p.top_p = field<float>(line, "top_p", p.top_p);
  p.min_p = field<float>(line, "min_p", p.min_p);
  p.repetition_penalty = field<float>(line, "repetition_penalty", p.repetition_penalty);
  p.presence_penalty = field<float>(line, "presence_penalty", p.presence_penalty);
  p.frequency_penalty = field<float>(line, "frequency_penalty", p.frequency_penalty);
  p.seed = field<std::uint64_t>(line, "seed", 0);
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
  r.max_tokens = field<std::int64_t>(line, "max_tokens", 256);
  r.sampling = sampling(line, defaults);
  if (line.contains("stop"))
    r.stop_strings = line["stop"].is_string() ? std::vector<std::string>{line["stop"].get<std::string>()}
                                              : field<std::vector<std::string>>(line, "stop", {});
  r.stop_token_ids = field<std::vector<std::uint32_t>>(line, "stop_token_ids", {});
  r.ignore_eos = field<bool>(line, "ignore_eos", false);
  r.priority = field<int>(line, "priority", 0);
  r.top_logprobs = field<int>(line, "top_logprobs", -1);
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
