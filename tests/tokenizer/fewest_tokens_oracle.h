#pragma once
// The test oracle for TokenTrie::fewest_tokens: a brute-force segmentation of `text` over a hash
// set of the token strings (every substring looked up), independent of the trie.
#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "plumb/tokenizer/token_trie.h"

namespace plumb::test {

inline std::size_t brute_fewest(const std::string& text, const std::unordered_set<std::string>& vocab) {
  std::vector<std::size_t> best(text.size() + 1, TokenTrie::kNone);
  best[0] = 0;
  for (std::size_t end = 1; end <= text.size(); ++end)
    for (std::size_t start = 0; start < end; ++start)
      if (best[start] != TokenTrie::kNone && vocab.count(text.substr(start, end - start)))
        best[end] = std::min(best[end], best[start] + 1);
  return best[text.size()];
}

}  // namespace plumb::test
