#pragma once
// The JSONL formats of `plumb batch`. An input line:
//   {"id": any, exactly one of "prompt": text | "prompt_ids": [ids] | "messages": [{"role", "content"}],
//    "max_tokens", "thinking" (messages only), sampling fields ("greedy", "temperature", "top_k",
//    "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed"),
//    "stop": text or [texts], "stop_token_ids", "ignore_eos", "priority", "top_logprobs"}
// An output line: {"id", "text", "token_ids", "finish_reason", "usage": {"prompt_tokens",
// "completion_tokens", "total_tokens"}} (+ "logprobs" when asked), or {"id", "error"} for a line
// that could not run. token_ids are the generated ids as `plumb generate --out-ids` writes them
// (a final EOS or stop token included).
#include <nlohmann/json.hpp>

#include <string>

#include "plumb/runtime/engine.h"
#include "plumb/runtime/generate_one.h"
#include "plumb/tokenizer/tokenizer.h"

namespace plumb::cli {

// Parses one request. Sampling fields the line does not set come from `defaults` (the model's
// generation_config.json), except that a temperature, top_k, top_p or min_p asks for sampling
// even when the default is greedy, and the seed defaults to 0 so reruns repeat. Throws
// plumb::Error naming the field.
runtime::Request parse_batch_request(const nlohmann::json& line, const Tokenizer& tokenizer,
                                     const SamplingParams& defaults);

nlohmann::ordered_json batch_result(const nlohmann::json& id, const runtime::RequestResult& r);
nlohmann::ordered_json batch_error(const nlohmann::json& id, const std::string& error);

}  // namespace plumb::cli
