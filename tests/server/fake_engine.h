#pragma once
// A scripted runtime::Engine for the server tests (test-only: the product has no fake). Each
// request plays a script of text pieces, one token per piece, one piece per step of its own
// engine thread; cancel() ends it at the next step like the real engine. Counts submissions and
// cancellations, and records the requests it received.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plumb/runtime/engine.h"
#include "plumb/util/error.h"

namespace plumb::test {

struct Script {
  std::vector<std::string> pieces = {"Hello", ",", " world"};
  runtime::FinishReason finish = runtime::FinishReason::kStop;
  std::chrono::milliseconds step{0};  // pause before each piece
  bool hold = false;                  // after the pieces, wait for cancel() (an idle stream)
};

class FakeEngine : public runtime::Engine {
 public:
  FakeEngine() : thread_([this] { loop(); }) {}
  ~FakeEngine() override { shutdown(); }

  std::function<Script(const runtime::Request&)> script = [](const runtime::Request&) { return Script{}; };
  std::atomic<int> cancels{0}, submits{0};
  std::atomic<std::int64_t> waiting{0};  // what stats() reports as waiting
  std::int64_t context = 4096;

  std::vector<runtime::Request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

  runtime::RequestId submit(runtime::Request request, runtime::EventFn on_event) override {
    if (request.prompt.empty()) fail("prompt: at least one token is needed");
    std::lock_guard lock(mutex_);
    if (stopped_) fail("the engine is shut down");
    runtime::RequestId id = next_id_++;
    Job job{id, script(request), std::move(on_event), request.prompt.size(), request.top_logprobs};
    received_.push_back(std::move(request));
    jobs_.emplace(id, std::move(job));
    ++submits;
    cv_.notify_all();
    return id;
  }

  void cancel(runtime::RequestId id) override {
    std::lock_guard lock(mutex_);
    if (auto it = jobs_.find(id); it != jobs_.end() && !it->second.cancelled) {
      it->second.cancelled = true;
      ++cancels;
      cv_.notify_all();
    }
  }

  runtime::EngineStats stats() const override {
    std::lock_guard lock(mutex_);
    runtime::EngineStats s;
    s.running = static_cast<std::int64_t>(jobs_.size());
    s.waiting = waiting.load();
    s.kv_blocks_total = 64;
    return s;
  }
  std::int64_t max_context() const override { return context; }
  std::int64_t vocab_size() const override { return 6144; }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
      for (auto& [id, job] : jobs_) job.cancelled = true;
      cv_.notify_all();
    }
    thread_.join();
  }

  std::size_t running() const {
    std::lock_guard lock(mutex_);
    return jobs_.size();
  }

 private:
  struct Job {
    runtime::RequestId id;
    Script script;
    runtime::EventFn on_event;
    std::size_t prompt_tokens;
    int top_logprobs;
    std::size_t next = 0;
    bool cancelled = false;
    std::chrono::steady_clock::time_point due = std::chrono::steady_clock::now();
  };

  // One step: every job that is due emits its next piece (or its final event).
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      auto now = std::chrono::steady_clock::now();
      auto wake = now + std::chrono::milliseconds(50);
      std::vector<std::pair<runtime::EventFn*, runtime::Event>> out;
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        Job& j = it->second;
        if (!j.cancelled && j.due > now) {
          wake = std::min(wake, j.due);
          ++it;
          continue;
        }
        runtime::Event e;
        e.id = j.id;
        bool end = j.cancelled || (j.next >= j.script.pieces.size() && !j.script.hold);
        if (!end && j.next < j.script.pieces.size()) {
          e.tokens = {static_cast<runtime::TokenId>(100 + j.next)};
          e.text = j.script.pieces[j.next++];
          if (j.top_logprobs >= 0) {
            e.logprobs = {{e.tokens[0], -0.25f}};
            e.top_logprobs = {{}};
            for (int k = 0; k < j.top_logprobs; ++k) e.top_logprobs[0].push_back({static_cast<runtime::TokenId>(200 + k), -1.0f - k});
          }
          j.due = now + j.script.step;
          wake = std::min(wake, j.due);
        } else if (!end) {
          ++it;  // holding: waits for cancel()
          continue;
        }
        if (end) {
          e.final = true;
          e.finish = j.cancelled ? runtime::FinishReason::kCancelled : j.script.finish;
          e.prompt_tokens = static_cast<std::int64_t>(j.prompt_tokens);
          e.completion_tokens = static_cast<std::int64_t>(j.next);
        }
        done_.push_back(j.on_event);
        out.emplace_back(&done_.back(), std::move(e));
        it = end ? jobs_.erase(it) : std::next(it);
      }
      // Events are delivered in order, outside the lock (on_event may call submit or cancel).
      lock.unlock();
      for (auto& [fn, e] : out) (*fn)(e);
      lock.lock();
      done_.clear();
      if (stopped_ && jobs_.empty()) return;
      cv_.wait_until(lock, wake);
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<runtime::RequestId, Job> jobs_;
  std::deque<runtime::EventFn> done_;  // callbacks of this step, kept alive while they run
  std::vector<runtime::Request> received_;
  runtime::RequestId next_id_ = 1;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace plumb::test
