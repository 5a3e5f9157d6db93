#pragma once
// Sampled tokens -> printable text for streamed generation: the streaming detokenizer holds back
// incomplete characters and the stop strings hold back what could still become a stop, so what
// reaches the sink is final. Each engine request has one (engine_request.h).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "plumb/runtime/stop_strings.h"
#include "plumb/tokenizer/decode_stream.h"

namespace plumb {

// Receives text that is safe to print now; called once per non-empty chunk.
using TextSink = std::function<void(std::string_view text)>;

class TextStream {
 public:
  // Every chunk sent to `sink` is also appended to `text`; both must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops, const TextSink& sink, std::string& text)
      : detok_(tokenizer), stops_(std::move(stops)), sink_(sink), text_(text) {}

  // Returns true when a stop string was completed. Throws plumb::Error on an unknown id.
  bool push(std::uint32_t token) { return emit(stops_.push(detok_.push(token))); }

  // End without a stop string: flush what is held back (an incomplete character becomes U+FFFD).
  // Returns true when the flushed characters completed a stop string after all.
  bool finish() {
    if (emit(stops_.push(detok_.finish()))) return true;
    emit({stops_.finish(), false});
    return false;
  }

 private:
  bool emit(const StopStrings::Output& out) {
    if (!out.text.empty()) {
      text_ += out.text;
      sink_(out.text);
    }
    return out.stopped;
  }

  StreamingDetokenizer detok_;
  StopStrings stops_;
  const TextSink& sink_;
  std::string& text_;
};

}  // namespace plumb
