// The bad-input corpus (issue #19): every command and file kind fed hostile, extreme or broken
// input through the built `plumb` binary. Each case must end with exit code 2 and a one-line
// message naming the thing that is wrong (and the limit it broke), quickly: no crash, no hang,
// no silent acceptance. Inputs are built at test time in a temporary directory from tiny-kjv
// (weights symlinked, the small files copied and edited).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../convert/convert_test_util.h"
#include "hostile_files.h"
#include "plumb/format/npy.h"
#include "plumb/format/safetensors.h"

namespace plumb::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kKjv = fs::path(PLUMB_SOURCE_DIR) / "models" / "tiny-kjv";

// A scratch directory with helpers that build the inputs of one case.
std::string make_fifo(const fs::path& p) {
  if (::mkfifo(p.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + p.string());
  return p.string();
}

class Scratch {
 public:
  Scratch() : dir_(fs::temp_directory_path() / ("plumb-bad-input-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string file(const std::string& name, const std::string& bytes) const {
    write_bytes(dir_ / name, bytes);
    return path(name);
  }
  std::string fifo(const std::string& name) const { return make_fifo(dir_ / name); }
  // Replaces the file `name` of a model directory by a FIFO and returns the directory.
  static std::string with_fifo(const std::string& model, const std::string& name) {
    fs::remove(fs::path(model) / name);
    make_fifo(fs::path(model) / name);
    return model;
  }
  std::string ids(const std::vector<int32_t>& v, const std::string& name = "ids.npy") const {
    write_npy(path(name), DType::I32, {static_cast<int64_t>(v.size())}, v.data());
    return path(name);
  }
  std::string npy_with_header(const std::string& header, const std::string& data, int major = 1) const {
    return file("hostile.npy", npy_bytes(header, data, major));
  }

  // tiny-kjv with its weights linked and `edit` applied to config.json (written as `text` when
  // `raw` is set, for JSON that nlohmann cannot produce such as 1e999).
  std::string model(const std::function<void(json&)>& edit = {}, const std::string& raw = "") const {
    const fs::path m = dir_ / "model";
    fs::create_directories(m);
    for (const auto& e : fs::directory_iterator(kKjv)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() == ".safetensors") fs::create_symlink(e.path(), m / name);
      else fs::copy_file(e.path(), m / name, fs::copy_options::overwrite_existing);
    }
    json c = read_json_file(m / "config.json");
    if (edit) edit(c);
    write_bytes(m / "config.json", raw.empty() ? c.dump(2) : raw);
    return m.string();
  }
  // The model with tokenizer.json edited.
  std::string model_with_tokenizer(const std::function<void(json&)>& edit) const {
    const std::string m = model();
    json t = read_json_file(fs::path(m) / "tokenizer.json");
    edit(t);
    write_bytes(fs::path(m) / "tokenizer.json", t.dump());
    return m;
  }
  // The model with one element of tensor `name` overwritten by `bytes` in a private copy of its shard.
  std::string model_with_poked_tensor(const std::string& name, const std::string& bytes) const {
    const std::string m = model();
    const Checkpoint ckpt = Checkpoint::open(m);
    const TensorInfo& t = ckpt.at(name);
    const fs::path shard = ckpt.shards()[t.shard]->path();
    const fs::path target = fs::path(m) / shard.filename();
    const fs::path real = fs::read_symlink(target);
    fs::remove(target);
    fs::copy_file(real, target);
    poke(target, t.data_begin, bytes);
    return m;
  }
  std::string model_with_generation_config(const json& g) const {
    const std::string m = model();
    write_bytes(fs::path(m) / "generation_config.json", g.dump());
    return m;
  }
  std::string jsonl(const std::string& text) const { return file("in.jsonl", text); }

 private:
  fs::path dir_;
};

struct BadInput {
  std::string name;
  std::function<std::string(const Scratch&)> args;  // builds the inputs, returns the command line
  std::vector<std::string> expected;                 // substrings of the error message
};

std::string hostile_tokenizer_args(const Scratch& s, const std::function<void(json&)>& edit) {
  return "tokenize --tokenizer " + s.model_with_tokenizer(edit) + " --input " + s.jsonl("\"hi\"\n") + " --output " +
         s.path("out.jsonl");
}

std::string logits_args(const Scratch& s, const std::string& model, const std::string& ids) {
  return "logits --model " + model + " --ids " + ids + " --out " + s.path("logits.npy");
}

std::string logits_with_config(const Scratch& s, const std::function<void(json&)>& edit) {
  return logits_args(s, s.model(edit), s.ids({0, 5, 9}));
}

std::string logits_with_ids(const Scratch& s, const std::string& ids) { return logits_args(s, s.model(), ids); }

const std::string kF4Header = "{'descr': '<f4', 'fortran_order': False, 'shape': ";

std::vector<BadInput> corpus() {
  const int64_t k2e40 = int64_t{1} << 40;
  return {
      // ---- config.json (every command that loads a model reads it first)
      {"config_sliding_window_2e40", [=](const Scratch& s) { return logits_with_config(s, [=](json& c) { c["sliding_window"] = k2e40; }); },
       {"field 'sliding_window' is 1099511627776, above the limit of 1048576 (max_position_embeddings)"}},
      {"config_index_topk_2e40", [=](const Scratch& s) { return logits_with_config(s, [=](json& c) { c["index_topk"] = k2e40; }); },
       {"field 'index_topk' is 1099511627776, above the limit"}},
      {"config_hc_sinkhorn_iters_2e40",
       [=](const Scratch& s) { return logits_with_config(s, [=](json& c) { c["hc_sinkhorn_iters"] = k2e40; }); },
       {"field 'hc_sinkhorn_iters'", "above the limit of 1000"}},
      {"config_heads_2e62",
       [](const Scratch& s) { return logits_with_config(s, [](json& c) { c["num_attention_heads"] = int64_t{1} << 62; }); },
       {"field 'num_attention_heads'", "above the limit of 4096"}},
      {"config_rms_norm_eps_1e999",
       [](const Scratch& s) {
         std::string text = read_json_file(kKjv / "config.json").dump(2);
         const std::string key = "\"rms_norm_eps\": 1e-06";
         text.replace(text.find(key), key.size(), "\"rms_norm_eps\": 1e999");
         return logits_args(s, s.model({}, text), s.ids({1}));
       },
       {"config.json: invalid JSON: field 'rms_norm_eps'", "number overflow"}},
      {"config_is_a_fifo",
       [](const Scratch& s) { return logits_args(s, Scratch::with_fifo(s.model(), "config.json"), s.ids({1})); },
       {"config.json: the config file is a FIFO"}},
      {"convert_config_2e40",
       [=](const Scratch& s) {
         return "convert cast --to bf16 " + s.model([=](json& c) { c["index_topk"] = k2e40; }) + " " + s.path("out");
       },
       {"field 'index_topk'", "above the limit"}},
      {"synth_config_2e40",
       [=](const Scratch& s) {
         return "synth --config " + s.model([=](json& c) { c["hc_mult"] = k2e40; }) + " --out " + s.path("out");
       },
       {"field 'hc_mult' is 1099511627776, above the limit of 64"}},

      // ---- tokenizer.json
      {"tokenizer_vocab_id_4294967295", [](const Scratch& s) { return hostile_tokenizer_args(s, [](json& t) { t["model"]["vocab"]["zz"] = 4294967295u; }); },
       {"model.vocab[\"zz\"] = 4294967295 is too large (token ids must be below 2097152)"}},
      {"tokenizer_vocab_id_50000000", [](const Scratch& s) { return hostile_tokenizer_args(s, [](json& t) { t["model"]["vocab"]["zz"] = 50000000; }); },
       {"= 50000000 is too large"}},
      {"tokenizer_added_id_minus_1",
       [](const Scratch& s) { return hostile_tokenizer_args(s, [](json& t) { t["added_tokens"][0]["id"] = -1; }); },
       {"added_tokens[0].id must be an integer in [0, 2097152), got -1"}},
      {"tokenizer_added_id_4294967295",
       [](const Scratch& s) { return hostile_tokenizer_args(s, [](json& t) { t["added_tokens"][0]["id"] = 4294967295u; }); },
       {"added_tokens[0].id", "got 4294967295"}},
      {"tokenizer_added_id_300000000",
       [](const Scratch& s) { return hostile_tokenizer_args(s, [](json& t) { t["added_tokens"][0]["id"] = 300000000; }); },
       {"added_tokens[0].id", "got 300000000"}},
      {"tokenizer_added_tokens_5mb",
       [](const Scratch& s) {
         return hostile_tokenizer_args(s, [](json& t) {
           for (int i = 0; i < 5000; ++i)
             t["added_tokens"].push_back({{"id", 7000 + i}, {"content", std::to_string(i) + std::string(1024, 'q')}});
         });
       },
       {"added_tokens: the contents of the first", "total more than the 4194304 bytes"}},
      {"tokenizer_is_a_fifo",
       [](const Scratch& s) {
         return "tokenize --tokenizer " + Scratch::with_fifo(s.model(), "tokenizer.json") + " --input " + s.jsonl("\"hi\"\n");
       },
       {"tokenizer.json: the tokenizer file is a FIFO"}},
      {"detokenize_id_beyond_vocab",
       [](const Scratch& s) { return "detokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("[1, 99999999]\n"); },
       {"token id 99999999 is out of range"}},

      // ---- JSON-lines inputs of tokenize / detokenize (a named file must be regular; stdin streams, lines bounded)
      {"tokenize_input_dev_zero",
       [](const Scratch&) { return "tokenize --tokenizer " + kKjv.string() + " --input /dev/zero"; },
       {"/dev/zero: the input file is a character device; plumb reads only regular files"}},
      {"tokenize_input_fifo",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " --input " + s.fifo("in.jsonl"); },
       {"in.jsonl: the input file is a FIFO"}},
      {"tokenize_input_directory",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " --input " + s.path(""); },
       {"the input file is a directory"}},
      {"tokenize_stdin_dev_zero",
       [](const Scratch&) { return "tokenize --tokenizer " + kKjv.string() + " --input - < /dev/zero"; },
       {"<stdin>:1: a line longer than 67108864 bytes, the most plumb reads"}},
      {"tokenize_stdin_directory",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " < " + s.path(""); },
       {"<stdin>: read error after 0 lines"}},
      {"tokenize_line_not_json",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("\"ok\"\n{\"a\n"); },
       {"in.jsonl:2: not valid JSON: {\"a"}},
      {"tokenize_line_not_a_string",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("[1, 2]\n"); },
       {"in.jsonl:1: expected a JSON string, got array"}},
      {"tokenize_line_invalid_utf8",
       [](const Scratch& s) { return "tokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("\"a\xff\"\n"); },
       {"in.jsonl:1: not valid JSON"}},
      {"detokenize_negative_id",
       [](const Scratch& s) { return "detokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("[1, -1]\n"); },
       {"in.jsonl:1: token ids must be non-negative integers, got -1"}},
      {"detokenize_id_2e32",
       [](const Scratch& s) { return "detokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("[4294967296]\n"); },
       {"in.jsonl:1: token ids must be non-negative integers, got 4294967296"}},
      {"detokenize_not_an_array",
       [](const Scratch& s) { return "detokenize --tokenizer " + kKjv.string() + " --input " + s.jsonl("{\"ids\": [1]}\n"); },
       {"in.jsonl:1: expected a JSON array of token ids, got object"}},

      // ---- plumb batch: its --input (the lines' fields: BadInputBatch below)
      {"batch_input_dev_zero",
       [](const Scratch& s) { return "batch --model " + kKjv.string() + " --input /dev/zero --output " + s.path("o.jsonl"); },
       {"/dev/zero: the input file is a character device"}},
      {"batch_input_fifo",
       [](const Scratch& s) { return "batch --model " + kKjv.string() + " --input " + s.fifo("in.jsonl") + " --output " + s.path("o.jsonl"); },
       {"in.jsonl: the input file is a FIFO"}},
      {"batch_input_directory",
       [](const Scratch& s) { return "batch --model " + kKjv.string() + " --input " + s.path("") + " --output " + s.path("o.jsonl"); },
       {"the input file is a directory"}},
      {"batch_input_line_64mb",
       [](const Scratch& s) {
         return "batch --model " + kKjv.string() + " --input " + s.jsonl("{}\n" + std::string((64 << 20) + 1, ' ')) + " --output " +
                s.path("o.jsonl");
       },
       {"in.jsonl:2: a line longer than 67108864 bytes"}},

      // ---- plumb serve flags (refused before the model loads)
      {"serve_http_threads_100000",
       [](const Scratch&) { return "serve --model " + kKjv.string() + " --http-threads 100000"; },
       {"--http-threads", "100000"}},
      {"serve_port_70000", [](const Scratch&) { return "serve --model " + kKjv.string() + " --port 70000"; }, {"--port", "70000"}},
      {"serve_max_queue_0", [](const Scratch&) { return "serve --model " + kKjv.string() + " --max-queue 0"; },
       {"--max-queue: must be at least 1, got 0"}},

      // ---- .npy token ids (logits, generate, verify read them alike)
      {"npy_header_65kb_spaces",
       [](const Scratch& s) {
         return logits_with_ids(s, s.npy_with_header(kF4Header + "(1," + std::string(65000, ' ') + "), }", std::string(4, '\0')));
       },
       {"token ids must be int32 or int64, got F32"}},
      {"npy_header_2mb_spaces",
       [](const Scratch& s) {
         return logits_with_ids(s, s.npy_with_header(kF4Header + "(1," + std::string(2 << 20, ' ') + "), }", std::string(4, '\0'), 2));
       },
       {"token ids must be int32 or int64, got F32"}},
      {"npy_shape_2e62_plus_1",
       [](const Scratch& s) { return logits_with_ids(s, s.npy_with_header(kF4Header + "(4611686018427387905,), }", std::string(4, '\0'))); },
       {"hostile.npy: .npy shape [4611686018427387905] F32 is more bytes than fit in 64 bits"}},
      {"npy_dim_beyond_int64",
       [](const Scratch& s) { return logits_with_ids(s, s.npy_with_header(kF4Header + "(9223372036854775808,), }", "")); },
       {"hostile.npy: malformed .npy header (a dimension beyond int64"}},
      {"npy_negative_dim",
       [](const Scratch& s) { return logits_with_ids(s, s.npy_with_header(kF4Header + "(-3,), }", "")); },
       {"hostile.npy: malformed .npy header (a negative dimension"}},
      {"npy_is_a_fifo", [](const Scratch& s) { return logits_with_ids(s, s.fifo("ids.npy")); }, {"ids.npy: the file is a FIFO"}},
      {"npy_is_dev_zero", [](const Scratch& s) { return logits_with_ids(s, "/dev/zero"); }, {"/dev/zero: the file is a character device"}},
      {"verify_negative_dim",
       [](const Scratch& s) {
         return "verify --model " + kKjv.string() + " --ids " + s.npy_with_header(kF4Header + "(-3,), }", "") + " --report " + s.path("r");
       },
       {"a negative dimension"}},

      // ---- flags
      {"logits_threads_100000", [](const Scratch& s) { return logits_with_ids(s, s.ids({1})) + " --threads 100000"; },
       {"--threads", "100000 is more than this machine's"}},
      {"generate_threads_100000",
       [](const Scratch& s) { return "generate --model " + kKjv.string() + " --ids " + s.ids({1}) + " --max-new-tokens 1 --out-ids " + s.path("o.npy") + " --threads 100000"; },
       {"--threads", "hardware threads"}},
      {"run_threads_100000", [](const Scratch&) { return "run --model " + kKjv.string() + " --prompt hi --threads 100000"; },
       {"--threads", "hardware threads"}},
      {"perplexity_threads_100000",
       [](const Scratch& s) { return "perplexity --model " + kKjv.string() + " --file " + s.file("t.txt", "In the beginning") + " --threads 100000"; },
       {"--threads", "hardware threads"}},
      {"verify_threads_100000",
       [](const Scratch& s) { return "verify --model " + kKjv.string() + " --ids " + s.ids({1}) + " --report " + s.path("r") + " --threads 100000"; },
       {"--threads", "hardware threads"}},
      {"generate_max_new_tokens_beyond_context",
       [](const Scratch& s) {
         return "generate --model " + kKjv.string() + " --ids " + s.ids({1, 2}) + " --max-new-tokens 99999999999 --out-ids " + s.path("o.npy");
       },
       {"the prompt (--ids) + --max-new-tokens = 100000000001 tokens exceed the model's context of 1048576 tokens"}},
      {"run_max_new_tokens_beyond_context",
       [](const Scratch&) { return "run --model " + kKjv.string() + " --prompt hi --max-new-tokens 99999999999 --greedy"; },
       {"the prompt + --max-new-tokens", "exceed the model's context of 1048576 tokens (max_position_embeddings)"}},
      {"logits_prompt_beyond_context",
       [](const Scratch& s) {
         return logits_args(s, s.model([](json& c) { c["max_position_embeddings"] = 64; }), s.ids(std::vector<int32_t>(65, 7)));
       },
       {"the prompt (--ids) = 65 tokens exceed the model's context of 64 tokens"}},
      {"perplexity_context_beyond_model",
       [](const Scratch& s) {
         return "perplexity --model " + s.model([](json& c) { c["max_position_embeddings"] = 64; }) + " --context 64 --file " +
                s.file("t.txt", "In the beginning");
       },
       {"--context + the BOS of each window = 65 tokens exceed the model's context of 64"}},
      {"run_seed_minus_1", [](const Scratch&) { return "run --model " + kKjv.string() + " --prompt hi --seed -1"; },
       {"--seed", "must be at least 0, got -1"}},
      {"generate_seed_minus_1",
       [](const Scratch& s) { return "generate --model " + kKjv.string() + " --ids " + s.ids({1}) + " --max-new-tokens 1 --out-ids " + s.path("o.npy") + " --seed -1"; },
       {"--seed", "must be at least 0, got -1"}},

      // ---- files that are not regular files
      {"perplexity_file_dev_zero", [](const Scratch&) { return "perplexity --model " + kKjv.string() + " --file /dev/zero"; },
       {"/dev/zero: the text file is a character device; plumb reads only regular files"}},
      {"perplexity_file_fifo", [](const Scratch& s) { return "perplexity --model " + kKjv.string() + " --file " + s.fifo("text"); },
       {"text: the text file is a FIFO"}},
      {"perplexity_file_directory", [](const Scratch& s) { return "perplexity --model " + kKjv.string() + " --file " + s.path(""); },
       {"the text file is a directory"}},
      {"checkpoint_shard_is_a_fifo",
       [](const Scratch& s) { return "inspect " + Scratch::with_fifo(s.model(), "model-00003-of-00008.safetensors"); },
       {"model-00003-of-00008.safetensors: the file is a FIFO"}},
      {"chat_stdin_dev_zero", [](const Scratch&) { return "chat --model " + kKjv.string() + " --greedy < /dev/zero"; },
       {"stdin: a line longer than 67108864 bytes"}},
      {"chat_stdin_directory", [](const Scratch& s) { return "chat --model " + kKjv.string() + " --greedy < " + s.path(""); },
       {"stdin: read error"}},

      // ---- non-finite weights: refused like run and perplexity refuse them
      {"logits_nan_weights",
       [](const Scratch& s) { return logits_args(s, s.model_with_poked_tensor("norm.weight", std::string("\xc0\x7f\xc0\x7f", 4)), s.ids({0, 5})); },
       {"logits (a NaN or infinity in the weights?): non-finite value nan at index 0"}},
      {"generate_nan_weights",
       [](const Scratch& s) {
         return "generate --model " + s.model_with_poked_tensor("norm.weight", std::string("\xc0\x7f\xc0\x7f", 4)) + " --ids " + s.ids({0, 5}) +
                " --max-new-tokens 3 --greedy --out-ids " + s.path("o.npy");
       },
       {"generate: step 0: logits (a NaN or infinity in the weights?): non-finite value nan"}},
      {"convert_cast_nan_fp8_weight",
       [](const Scratch& s) {
         return "convert cast --to bf16 " + s.model_with_poked_tensor("layers.0.attn.wq_a.weight", std::string(3, '\x7f')) + " " + s.path("out");
       },
       {"layers.0.attn.wq_a.weight: non-finite value nan at index 0"}},
      // ---- convert shard / experts
      {"convert_shard_tp_0", [](const Scratch& s) { return "convert shard --tp 0 " + kKjv.string() + " " + s.path("out"); },
       {"--tp: must be at least 1, got 0"}},
      {"convert_shard_tp_not_dividing_the_experts",
       [](const Scratch& s) { return "convert shard --tp 3 " + kKjv.string() + " " + s.path("out"); },
       {"n_routed_experts 16 is not divisible by --tp 3"}},
      {"convert_shard_tp_2e40",
       [](const Scratch& s) { return "convert shard --tp 1099511627776 " + kKjv.string() + " " + s.path("out"); },
       {"is not divisible by --tp 1099511627776"}},
      {"convert_shard_output_inside_the_source",
       [](const Scratch& s) {
         const std::string m = s.model();
         return "convert shard --tp 2 " + m + " " + m + "/sharded";
       },
       {"the output must not be, contain or lie inside the source"}},
      {"convert_experts_of_a_v3_checkpoint",
       [](const Scratch& s) {
         return "convert experts --to fp8 " + (fs::path(PLUMB_SOURCE_DIR) / "tests/data/golden/v3/tiny-a").string() + " " +
                s.path("out");
       },
       {"deepseek_v3 has no FP4 experts"}},
      {"convert_experts_nan_scale",  // ue8m0 0xFF is NaN: re-encoding it would write NaN weights
       [](const Scratch& s) {
         return "convert experts --to fp8 " + s.model_with_poked_tensor("layers.0.ffn.experts.0.w1.scale", std::string(1, '\xff')) +
                " " + s.path("out");
       },
       {"layers.0.ffn.experts.0.w1"}},
      // ---- range flags: a readable bound (CLI11's own printed a 309-digit one)
      {"generate_max_new_tokens_negative",
       [](const Scratch& s) { return "generate --model " + kKjv.string() + " --ids " + s.ids({1}) + " --max-new-tokens -1 --out-ids " + s.path("o.npy"); },
       {"--max-new-tokens: must be at least 0, got -1"}},
      {"serve_drain_timeout_negative", [](const Scratch&) { return "serve --model " + kKjv.string() + " --drain-timeout -2"; },
       {"--drain-timeout: must be 0 or more seconds, got -2"}},
      {"doctor_model_nan_weights",
       [](const Scratch& s) { return "doctor --model " + s.model_with_poked_tensor("norm.weight", std::string("\xc0\x7f\xc0\x7f", 4)); },
       {"scan found 1 problem(s), first: norm.weight"}},
      {"doctor_model_shard_is_a_fifo",
       [](const Scratch& s) { return "doctor --model " + Scratch::with_fifo(s.model(), "model-00003-of-00008.safetensors"); },
       {"model-00003-of-00008.safetensors: the file is a FIFO"}},

      // ---- generation_config.json
      {"generation_config_top_k_2e40",
       [=](const Scratch& s) { return "run --model " + s.model_with_generation_config({{"do_sample", true}, {"top_k", k2e40}}) + " --prompt hi"; },
       {"generation_config.json: field 'top_k' must be in [0, 2147483647], got 1099511627776"}},
      {"generation_config_top_k_2e32_plus_1",
       [](const Scratch& s) {
         return "run --model " + s.model_with_generation_config({{"do_sample", true}, {"top_k", (int64_t{1} << 32) + 1}}) + " --prompt hi";
       },
       {"field 'top_k'", "got 4294967297"}},

      // ---- output directories
      {"synth_force_over_its_own_config",
       [](const Scratch& s) { return "synth --config " + s.model() + "/config.json --out " + s.path("model") + " --force"; },
       {"the output must not be, contain or lie inside the source"}},
      {"synth_existing_out_without_force",
       [](const Scratch& s) { return "synth --config " + kKjv.string() + " --out " + s.model(); },
       {"already exists (pass --force"}},
  };
}

class BadInputCli : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputCli, ExitsTwoNamingTheProblem) {
  const BadInput& c = GetParam();
  const Scratch scratch;
  const std::string args = c.args(scratch);
  const CliResult r = run_plumb(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  for (const std::string& e : c.expected) EXPECT_NE(r.output.find(e), std::string::npos) << "missing: " << e << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(AllCommands, BadInputCli, ::testing::ValuesIn(corpus()),
                         [](const ::testing::TestParamInfo<BadInput>& i) { return i.param.name; });

// Issue #19, data loss: synth deleted an unrelated OUT.tmp/ and left its own partial one behind.
// Now it writes OUT.tmp-<pid>, leaves OUT.tmp alone and leaves no temporary directory.
TEST(BadInputSynth, KeepsAnUnrelatedTmpDirectory) {
  const Scratch s;
  const fs::path out = s.path("ckpt"), unrelated = s.path("ckpt.tmp");
  fs::create_directories(unrelated);
  write_bytes(unrelated / "precious.txt", "keep me");
  const CliResult r = run_plumb("synth --config " + std::string(PLUMB_SOURCE_DIR) + "/tools/tiny-v4/config.json --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_EQ(read_bytes(unrelated / "precious.txt"), "keep me");
  int siblings = 0;
  for (const auto& e : fs::directory_iterator(out.parent_path())) siblings += e.path().filename().string().starts_with("ckpt");
  EXPECT_EQ(siblings, 2) << "only ckpt and the unrelated ckpt.tmp, no ckpt.tmp-<pid> left";
}

// ... and on a write error (here a file size limit, as a full disk would give) it removes its own
// temporary directory and leaves no OUT.
TEST(BadInputSynth, RemovesItsTemporaryDirectoryOnAWriteError) {
  const Scratch s;
  const fs::path out = s.path("ckpt");
  const std::string cmd = "bash -c 'trap \"\" XFSZ; ulimit -f 64; exec " + std::string(PLUMB_BINARY) + " synth --config " +
                          std::string(PLUMB_SOURCE_DIR) + "/tools/tiny-v4/config.json --out " + out.string() + "' > " +
                          s.path("log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string log = read_bytes(s.path("log"));
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 2) << log;
  EXPECT_NE(log.find("plumb: error: "), std::string::npos) << log;
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    EXPECT_FALSE(e.path().filename().string().starts_with("ckpt")) << e.path() << " left behind\n" << log;
}

// Issue #19: one invalid UTF-8 line ended the chat (exit 2) and lost the conversation. Now that
// turn is refused with a message and the next one is answered.
TEST(BadInputChat, InvalidUtf8LineRejectsOnlyThatTurn) {
  const Scratch s;
  const std::string in = s.file("in.txt", "bad \xff\xfe line\nIn the beginning\n");
  const CliResult r =
      run_plumb("chat --model " + kKjv.string() + " --greedy --max-new-tokens 4 < " + in);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("not valid UTF-8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("message ignored"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(0 cached), 4 generated"), std::string::npos) << "the next turn got no answer:\n"
                                                                       << r.output;
}

// plumb batch answers a bad line with an error record naming the line and the field, and runs
// the others: integers out of their range are refused, not truncated (top_logprobs 2^32 + 3 read
// as an int was 3; a stop id of 2^32 + 1 was 1; seed -1 wrapped).
TEST(BadInputBatch, HostileLinesGetErrorRecordsAndTheOthersRun) {
  const Scratch s;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "a", "top_k": 1099511627776})", "line 1: field 'top_k' must be in [0, 2147483647], got 1099511627776"},
      {R"({"prompt": "a", "top_logprobs": 4294967299})", "line 2: field 'top_logprobs' must be in [-1, 20], got 4294967299"},
      {R"({"prompt": "a", "stop_token_ids": [4294967297]})", "line 3: stop_token_ids: 4294967297 is not a token id"},
      {R"({"prompt": "a", "seed": -1})", "line 4: field 'seed' must be in [0, 9223372036854775807], got -1"},
      {R"({"prompt": "a", "priority": 1099511627776})", "line 5: field 'priority' must be in [-2147483648, 2147483647]"},
      {R"({"prompt": "a", "max_tokens": 0})", "line 6: field 'max_tokens' must be in [1, 9223372036854775807], got 0"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "line 7: field 'max_tokens' must be an integer, got number"},
      {R"({"prompt_ids": [-1]})", "line 8: prompt_ids: -1 is not a token id"},
      {R"({"prompt_ids": [99999999]})", "line 9: request: prompt token 99999999 (index 0) is outside the vocabulary"},
      {R"({"prompt": "a", "temperature": "hot"})", "line 10: field 'temperature' has the wrong type (string)"},
      {R"({"messages": []})", "line 11: 'messages' must be a non-empty array"},
      {R"({"prompt": "a", "colour": 1})", "line 12: unknown field 'colour'"},
      {R"([1, 2])", "line 13: a request line must be a JSON object"},
      {"{\"prompt\": \"a\xff\"}", "line 14: "},  // invalid UTF-8: not JSON
      {R"({"prompt": "a", "temperature": 1e999})", "line 15: "},
      {R"({"id": "ok", "prompt": "In the beginning", "max_tokens": 2, "greedy": true})", ""},
  };
  std::string input;
  for (const auto& [line, error] : cases) input += line + "\n";
  const std::string out = s.path("o.jsonl");
  const CliResult r = run_plumb("batch --quiet --model " + kKjv.string() + " --input " + s.jsonl(input) + " --output " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream results(out);
  std::size_t i = 0;
  for (std::string line; std::getline(results, line); ++i) {
    ASSERT_LT(i, cases.size()) << line;
    const json rec = json::parse(line);
    if (cases[i].second.empty()) {
      EXPECT_EQ(rec["finish_reason"], "length") << line;
      EXPECT_EQ(rec["token_ids"].size(), 2u) << line;
      continue;
    }
    ASSERT_TRUE(rec.contains("error")) << cases[i].first << " -> " << line;
    EXPECT_NE(rec["error"].get<std::string>().find(cases[i].second), std::string::npos) << rec["error"];
    EXPECT_EQ(rec["error"].get<std::string>().find("internal error"), std::string::npos) << rec["error"];
  }
  EXPECT_EQ(i, cases.size());
}

// Issue #19: more windows per batch than the text has passed a null pointer to memcpy (UB, seen
// by UBSan in the sanitized run of this test). The result must equal the one-window-per-call one.
TEST(BadInputPerplexity, BatchLargerThanTheTextMatchesBatchOne) {
  const Scratch s;
  const std::string text = s.file("t.txt", "In the beginning God created the heaven and the earth.");
  const std::string base = "perplexity --model " + kKjv.string() + " --no-progress --context 8 --file " + text;
  const CliResult one = run_plumb(base + " --batch 1"), huge = run_plumb(base + " --batch 100000");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(huge.status, 0) << huge.output;
  // The report without its timing line.
  const auto report = [](const std::string& out) { return out.substr(0, out.find("time ")); };
  EXPECT_EQ(report(huge.output), report(one.output));
  EXPECT_NE(one.output.find("perplexity  "), std::string::npos) << one.output;
}

}  // namespace
}  // namespace plumb::test
