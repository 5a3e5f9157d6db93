#include "plumb/runtime/model_group.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "plumb/util/error.h"

namespace plumb::runtime {

namespace {

enum class Op : std::uint32_t { kEnd = 1, kUseKvBlocks, kNewSequence, kFork, kForward };

struct Header {
  Op op = Op::kEnd;
  std::uint32_t pad = 0;
  std::uint64_t bytes = 0;  // the payload's, broadcast next
};

// A call's payload: trivially copyable values and length-prefixed arrays of them.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_span(std::span<const T> v) {
    put(static_cast<std::uint64_t>(v.size()));
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size_bytes());
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > bytes_.size() / sizeof(T)) fail("model group: a call's array of {} elements overruns its payload", n);
    std::vector<T> v(static_cast<std::size_t>(n));
    if (n > 0) std::memcpy(v.data(), take(v.size() * sizeof(T)), v.size() * sizeof(T));
    return v;
  }

 private:
  const std::uint8_t* take(std::size_t n) {
    if (n > bytes_.size() - at_) fail("model group: a call's payload ends {} bytes early", n - (bytes_.size() - at_));
    const std::uint8_t* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

// Ids of the lead's sequences destroyed since the last call (any thread may drop one).
struct Drops {
  std::mutex mu;
  std::vector<std::uint64_t> ids;
};

class LeadSequence final : public EngineModel::Sequence {
 public:
  LeadSequence(std::uint64_t id, std::unique_ptr<EngineModel::Sequence> local, std::shared_ptr<Drops> drops)
      : id_(id), local_(std::move(local)), drops_(std::move(drops)) {}
  ~LeadSequence() override {
    std::lock_guard lk(drops_->mu);
    drops_->ids.push_back(id_);
  }
  std::uint64_t id() const { return id_; }
  EngineModel::Sequence& local() const { return *local_; }

 private:
  std::uint64_t id_;
  std::unique_ptr<EngineModel::Sequence> local_;
  std::shared_ptr<Drops> drops_;
};

const LeadSequence& lead(const EngineModel::Sequence& s) { return dynamic_cast<const LeadSequence&>(s); }

// A failed call leaves the ranks out of step: every rank ends, this one saying why.
[[noreturn]] void end_every_rank(dist::Communicator& group, const char* what) {
  std::fprintf(stderr, "plumb: rank %d of the model group: a model call failed, ending every rank: %s\n", group.rank(), what);
  std::fflush(stderr);
  group.abort(1);
  std::abort();  // not reached (abort ends the process), but GCC does not see through the virtual call
}

class LeadModel final : public EngineModel {
 public:
  LeadModel(std::unique_ptr<EngineModel> local, dist::Communicator& group)
      : local_(std::move(local)), group_(group), drops_(std::make_shared<Drops>()) {}
  ~LeadModel() override {
    try {
      send(Op::kEnd, {});
    } catch (const std::exception& e) {
      end_every_rank(group_, e.what());
    }
  }

  std::unique_ptr<Sequence> new_sequence() override {
    const std::uint64_t id = next_id_++;
    Writer w;
    w.put(id);
    return mirrored(Op::kNewSequence, w, [&] { return std::make_unique<LeadSequence>(id, local_->new_sequence(), drops_); });
  }

  void use_kv_blocks(std::int64_t block_size, std::int64_t blocks, const KvFormat& format) override {
    Writer w;
    w.put(block_size);
    w.put(blocks);
    w.put(format);
    mirrored(Op::kUseKvBlocks, w, [&] { local_->use_kv_blocks(block_size, blocks, format); });
  }

  std::unique_ptr<Sequence> fork(const Sequence& seq, std::span<const std::int32_t> from_blocks,
                                 std::span<const std::int32_t> to_blocks) override {
    const std::uint64_t id = next_id_++;
    Writer w;
    w.put(id);
    w.put(lead(seq).id());
    w.put_span(from_blocks);
    w.put_span(to_blocks);
    return mirrored(Op::kFork, w, [&] {
      return std::make_unique<LeadSequence>(id, local_->fork(lead(seq).local(), from_blocks, to_blocks), drops_);
    });
  }

  std::vector<float> forward(std::span<const Chunk> batch) override {
    Writer w;
    w.put(static_cast<std::uint64_t>(batch.size()));
    std::vector<Chunk> local(batch.begin(), batch.end());
    for (Chunk& c : local) {
      w.put(lead(*c.seq).id());
      w.put(static_cast<std::uint8_t>(c.all_logits));
      w.put(static_cast<std::uint8_t>(c.last_logits));
      w.put_span(c.tokens);
      w.put_span(c.blocks);
      w.put(c.prefill);
      c.seq = &lead(*c.seq).local();
    }
    return mirrored(Op::kForward, w, [&] { return local_->forward(local); });
  }

  const ModelConfig& config() const override { return local_->config(); }
  std::int64_t weight_bytes() const override { return local_->weight_bytes(); }
  backend::DeviceMemory device_memory() const override { return local_->device_memory(); }

 private:
  // The call to the other ranks (with the sequences dropped since the last one), then here.
  void send(Op op, Writer body) {
    Writer w;
    {
      std::lock_guard lk(drops_->mu);
      w.put_span(std::span<const std::uint64_t>(drops_->ids));
      drops_->ids.clear();
    }
    w.bytes().insert(w.bytes().end(), body.bytes().begin(), body.bytes().end());
    Header h{op, 0, w.bytes().size()};
    group_.broadcast(&h, sizeof h, 0);
    group_.broadcast(w.bytes().data(), w.bytes().size(), 0);
  }
  template <class F>
  std::invoke_result_t<F> mirrored(Op op, Writer& body, F&& call) {
    try {
      send(op, std::move(body));
      return call();
    } catch (const std::exception& e) {
      end_every_rank(group_, e.what());
    }
  }

  std::unique_ptr<EngineModel> local_;
  dist::Communicator& group_;
  std::shared_ptr<Drops> drops_;
  std::uint64_t next_id_ = 1;
};

// A forward's chunks as the lead sent them, with the arrays they point into.
struct ForwardCall {
  std::vector<std::vector<std::uint32_t>> tokens;
  std::vector<std::vector<std::int32_t>> blocks;
  std::vector<EngineModel::Chunk> chunks;
};

ForwardCall read_forward(Reader& r, const std::map<std::uint64_t, std::unique_ptr<EngineModel::Sequence>>& seqs) {
  ForwardCall f;
  const auto n = r.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < n; ++i) {
    EngineModel::Chunk c;
    c.seq = seqs.at(r.get<std::uint64_t>()).get();
    c.all_logits = r.get<std::uint8_t>() != 0;
    c.last_logits = r.get<std::uint8_t>() != 0;
    f.tokens.push_back(r.get_vector<std::uint32_t>());
    f.blocks.push_back(r.get_vector<std::int32_t>());
    c.prefill = r.get<std::int64_t>();
    f.chunks.push_back(c);
  }
  for (std::size_t i = 0; i < f.chunks.size(); ++i) {  // the vectors no longer move
    f.chunks[i].tokens = f.tokens[i];
    f.chunks[i].blocks = f.blocks[i];
  }
  return f;
}

}  // namespace

std::unique_ptr<EngineModel> lead_model_group(std::unique_ptr<EngineModel> local, dist::Communicator& group) {
  if (!local) fail("lead_model_group: no model");
  if (group.rank() != 0) fail("lead_model_group: rank {} is not the group's lead (rank 0)", group.rank());
  return std::make_unique<LeadModel>(std::move(local), group);
}

void follow_model_group(EngineModel& local, dist::Communicator& group) {
  if (group.rank() == 0) fail("follow_model_group: rank 0 leads the group");
  std::map<std::uint64_t, std::unique_ptr<EngineModel::Sequence>> seqs;
  for (;;) {
    Header h;
    group.broadcast(&h, sizeof h, 0);
    std::vector<std::uint8_t> payload(static_cast<std::size_t>(h.bytes));
    group.broadcast(payload.data(), payload.size(), 0);
    try {
      Reader r(payload);
      for (const std::uint64_t id : r.get_vector<std::uint64_t>()) seqs.erase(id);
      switch (h.op) {
        case Op::kEnd:
          return;
        case Op::kUseKvBlocks: {
          const auto block_size = r.get<std::int64_t>(), blocks = r.get<std::int64_t>();
          local.use_kv_blocks(block_size, blocks, r.get<KvFormat>());
          break;
        }
        case Op::kNewSequence:
          seqs[r.get<std::uint64_t>()] = local.new_sequence();
          break;
        case Op::kFork: {
          const auto id = r.get<std::uint64_t>(), from = r.get<std::uint64_t>();
          const auto from_blocks = r.get_vector<std::int32_t>(), to_blocks = r.get_vector<std::int32_t>();
          seqs[id] = local.fork(*seqs.at(from), from_blocks, to_blocks);
          break;
        }
        case Op::kForward: {
          const ForwardCall f = read_forward(r, seqs);
          local.forward(f.chunks);  // every rank holds the logits; the lead samples
          break;
        }
        default:
          fail("model group: unknown call {}", static_cast<std::uint32_t>(h.op));
      }
    } catch (const std::exception& e) {
      end_every_rank(group, e.what());
    }
  }
}

}  // namespace plumb::runtime
