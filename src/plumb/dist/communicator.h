#pragma once
// A group of cooperating processes (ranks 0 .. size-1) and the few collectives the parallel
// layouts need (dist/parallel.h), on host buffers: the CPU backend's tensors live on the host.
// Every rank of a group must make the same calls in the same order (the layouts run the same
// program on every rank, so they do). The device-buffer collectives of the GPU backends are
// nccl_communicator.h's.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace plumb::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local" (one process, no MPI) or "mpi".
  virtual std::string transport() const = 0;

  virtual void barrier() = 0;
  // `bytes` bytes at `data` from rank `root` to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // out = rank 0's bytes, then rank 1's, ...; rank r contributes bytes[r] bytes (send holds
  // bytes[rank()] of them; every rank passes the same list, out holds their sum).
  virtual void all_gather_bytes(const void* send, std::span<const int64_t> bytes, void* out) = 0;
  // Rank r sends send_bytes[d] bytes to each rank d (send holds them in rank order) and receives
  // recv_bytes[s] bytes from each rank s into out, in rank order: MPI_Alltoallv. The counts must
  // match pairwise (what r sends to d is what d expects from r).
  virtual void all_to_all_bytes(const void* send, std::span<const int64_t> send_bytes, void* out,
                                std::span<const int64_t> recv_bytes) = 0;
  // The ranks that pass the same color, ranked by key (ties by this group's rank): MPI_Comm_split.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank of the world at once (a rank that failed must not leave the others waiting
  // in a collective). Does not return.
  [[noreturn]] virtual void abort(int code) = 0;

  // all_gather_bytes of typed elements: counts[r] elements from rank r.
  template <class T>
  std::vector<T> all_gather(std::span<const T> send, std::span<const int64_t> counts);
  // Every rank contributes the same number of elements.
  template <class T>
  std::vector<T> all_gather(std::span<const T> send);
};

// The one-process group: rank 0 of 1, every collective a copy; no MPI involved.
std::unique_ptr<Communicator> make_local_communicator();

template <class T>
std::vector<T> Communicator::all_gather(std::span<const T> send, std::span<const int64_t> counts) {
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (int64_t c : counts) {
    bytes.push_back(c * static_cast<int64_t>(sizeof(T)));
    total += c;
  }
  std::vector<T> out(static_cast<std::size_t>(total));
  all_gather_bytes(send.data(), bytes, out.data());
  return out;
}

template <class T>
std::vector<T> Communicator::all_gather(std::span<const T> send) {
  const std::vector<int64_t> counts(static_cast<std::size_t>(size()), static_cast<int64_t>(send.size()));
  return all_gather(send, std::span<const int64_t>(counts));
}

}  // namespace plumb::dist
