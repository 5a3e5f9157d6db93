// The one-process Communicator: what a run without a launcher uses (no MPI initialised).
#include <cstdlib>
#include <cstring>

#include "plumb/dist/communicator.h"
#include "plumb/util/error.h"

namespace plumb::dist {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string transport() const override { return "local"; }
  void barrier() override {}
  void broadcast(void*, std::size_t, int root) override {
    if (root != 0) fail("broadcast: root {} is not a rank of a 1-process group", root);
  }
  void all_gather_bytes(const void* send, std::span<const int64_t> bytes, void* out) override {
    if (bytes.size() != 1) fail("all_gather: {} counts for a 1-process group", bytes.size());
    if (bytes[0] > 0) std::memcpy(out, send, static_cast<std::size_t>(bytes[0]));
  }
  void all_to_all_bytes(const void* send, std::span<const int64_t> send_bytes, void* out,
                        std::span<const int64_t> recv_bytes) override {
    if (send_bytes.size() != 1 || recv_bytes.size() != 1 || send_bytes[0] != recv_bytes[0])
      fail("all_to_all: counts for a 1-process group must be one matching pair");
    if (send_bytes[0] > 0) std::memcpy(out, send, static_cast<std::size_t>(send_bytes[0]));
  }
  std::unique_ptr<Communicator> split(int, int) override { return make_local_communicator(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace plumb::dist
