#pragma once
// A small fixed-size thread pool for data-parallel loops (the CPU backend's GEMMs, attention and
// experts). parallel_for splits [0, n) into contiguous chunks; which thread runs a chunk never
// changes what is computed, so results do not depend on the thread count.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace plumb {

class ThreadPool {
 public:
  // More threads than this are refused (plumb::Error): a typo such as 100000 would otherwise
  // exhaust the system's threads for every process on the machine.
  static constexpr int kMaxThreads = 1024;

  // threads <= 0: one per hardware thread. The calling thread also works, so a pool of n
  // threads starts n - 1 workers. Throws plumb::Error above kMaxThreads or when the OS refuses
  // a thread (after stopping those already started).
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (except
  // the last), and returns when all are done. The first exception thrown by fn is rethrown here.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void stop_workers();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  // the job being run
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, next_ = 0, pending_ = 0;
  std::exception_ptr error_;
};

}  // namespace plumb
