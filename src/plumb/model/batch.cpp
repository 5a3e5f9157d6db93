#include "plumb/model/batch.h"

namespace plumb {

BatchLayout lay_out_batch(std::span<const SequenceStep> batch, const ModelConfig& cfg) {
  if (batch.empty()) fail("forward: empty batch");
  BatchLayout l;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const SequenceStep& in = batch[i];
    if (!in.state) fail("forward: sequence without state");
    for (std::size_t j = 0; j < i; ++j)
      if (batch[j].state == in.state) fail("forward: the same sequence state appears twice in one batch");
    if (in.tokens.empty()) fail("forward: a sequence has no new tokens");
    for (TokenId id : in.tokens)
      if (id >= static_cast<uint64_t>(cfg.vocab_size))
        fail("token id {} is outside the vocabulary [0, {})", id, cfg.vocab_size);
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    l.batch.seqs.push_back({l.batch.rows, n, in.state->pos});
    l.batch.rows += n;
    l.ids.insert(l.ids.end(), in.tokens.begin(), in.tokens.end());
    for (int64_t t = 0; t < n; ++t) l.positions.push_back(static_cast<int32_t>(in.state->pos + t));
  }
  return l;
}

void advance(std::span<const SequenceStep> batch) {
  for (const SequenceStep& s : batch) s.state->pos += static_cast<int64_t>(s.tokens.size());
}

void check_logit_rows(std::span<const int64_t> rows, int64_t n) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= n) fail("forward: logit row {} is outside the batch's {} rows", rows[i], n);
    if (i > 0 && rows[i] <= rows[i - 1])
      fail("forward: logit rows must be ascending and distinct, got {} after {}", rows[i], rows[i - 1]);
  }
}

backend::Tensor gather_rows(backend::Backend& be, const backend::Tensor& x, std::span<const int64_t> rows) {
  if (static_cast<int64_t>(rows.size()) == x.rows()) return x;  // checked rows: then all of them, in order
  backend::Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  backend::Tensor out = be.full(x.type(), shape, 0.f);
  // One copy per run of consecutive rows (a sequence's last row alone, or a span of a prompt).
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    be.copy_rows(out, static_cast<int64_t>(i), x, rows[i], static_cast<int64_t>(j - i));
    i = j;
  }
  return out;
}

}  // namespace plumb
