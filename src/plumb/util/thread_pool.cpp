#include "plumb/util/thread_pool.h"

#include <algorithm>
#include <exception>

#include "plumb/util/error.h"

namespace plumb {

ThreadPool::ThreadPool(int threads) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 0) threads = hardware;
  if (threads > kMaxThreads)
    fail("thread pool: {} threads requested, more than the limit of {} (this machine has {} hardware threads)",
         threads, kMaxThreads, hardware);
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::exception& e) {
    // The OS refused a thread (std::system_error): stop the ones already started, or ~thread
    // would terminate the process.
    const auto started = workers_.size();
    stop_workers();
    fail("thread pool: could only start {} of {} threads: {}", started + 1, threads, e.what());
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

// Claims chunks until none are left. Every participant (workers and the caller) runs this.
void ThreadPool::run_chunks() {
  for (;;) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      begin = next_;
      next_ += chunk_;
    }
    const int64_t end = std::min(n_, begin + chunk_);
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // A few chunks per thread balance uneven work without much locking.
  const int64_t chunk = std::max(grain, (n + 4 * size() - 1) / (4 * size()));
  if (workers_.empty() || chunk >= n) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_ = 0;
    pending_ = (n + chunk - 1) / chunk;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace plumb
