// plumb chat --model DIR [--think] [--system TEXT] [sampling and engine flags]
// An interactive multi-turn loop on stdin/stdout: each line is a user message, the answer streams
// back. `/reset` forgets the conversation, `/exit` or end of input quits.
//
// Each turn's prompt is the whole conversation, re-encoded with the chat template, and goes to
// the engine as a new request. The engine's prefix cache (--prefix-cache, on by default) keeps
// snapshots of the previous turns' states at KV block boundaries, so a conversation longer than
// a block continues from the last boundary it shares with what was read before instead of being
// re-read from the start; where the re-encoded history differs from what was fed (thinking mode
// drops earlier reasoning, a stop string cut the answer), the reuse ends there. The result is
// the same either way, only the time differs.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "commands.h"
#include "generation_flags.h"
#include "plumb/tokenizer/chat.h"
#include "plumb/util/error.h"
#include "plumb/util/read_file.h"

namespace plumb::cli {

namespace {
struct ChatArgs {
  GenerationFlags gen;
  std::string system;
  bool think = false;
};

class ChatLoop {
 public:
  ChatLoop(const ChatArgs& a, Generator& g) : a_(a), g_(g) { reset(); }

  int serve() {
    std::string line;
    for (;;) {
      print_now("> ");
      if (!read_line(std::cin, line, "stdin")) break;  // bounded: stdin may be /dev/zero
      if (line.ends_with('\r')) line.pop_back();  // CRLF input (a Windows pipe)
      if (line == "/exit") break;
      if (line == "/reset") {
        reset();
        std::fprintf(stderr, "(conversation cleared)\n");
      } else if (!line.empty()) {
        turn(line);
      }
    }
    // getline fails on a read error (stdin a directory, an I/O error) as it does at the end.
    if (std::cin.bad() || std::ferror(stdin)) fail("stdin: read error: {}", std::strerror(errno));
    print_now("\n");
    return 0;
  }

 private:
  void reset() {
    history_.clear();
    if (!a_.system.empty()) history_.push_back({ChatMessage::Role::kSystem, a_.system});
  }

  void turn(const std::string& user) {
    history_.push_back({ChatMessage::Role::kUser, user});
    std::vector<TokenId> prompt;
    try {  // a message that cannot be encoded (invalid UTF-8) or does not fit is rejected alone
      prompt = encode_chat(g_.tokenizer(), history_, a_.think ? ChatMode::kThinking : ChatMode::kChat);
      check_fits_context(static_cast<std::int64_t>(prompt.size()) + g_.defaults.max_tokens, g_.config,
                         "the conversation + --max-new-tokens");
    } catch (const Error& e) {
      history_.pop_back();
      std::fprintf(stderr, "chat: error: %s (message ignored; the conversation is kept, /reset clears it)\n",
                   e.what());
      return;
    }
    const Completion c = complete_streamed(g_, std::move(prompt));
    print_now("\n");
    std::fprintf(stderr, "chat: %s\n", stats_line(c, g_).c_str());
    history_.push_back({ChatMessage::Role::kAssistant, answer_of_completion(c.result.text)});
  }

  const ChatArgs& a_;
  Generator& g_;
  std::vector<ChatMessage> history_;
};
}  // namespace

Runner register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat on stdin/stdout (/reset, /exit)");
  auto a = std::make_shared<ChatArgs>();
  add_generation_flags(*cmd, a->gen);
  cmd->add_flag("--think", a->think, "thinking mode (the answer follows the reasoning and </think>)");
  cmd->add_option("--system", a->system, "system prompt");
  return [a] {
    Generator g = start_generator(a->gen);
    if (a->gen.self_check) report_self_check(g);
    return ChatLoop(*a, g).serve();
  };
}

}  // namespace plumb::cli
