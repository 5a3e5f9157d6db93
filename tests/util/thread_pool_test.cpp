#include "plumb/util/thread_pool.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "plumb/util/error.h"

namespace plumb {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b >= 50) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

// Issue #19: --threads 100000 started that many threads and starved every process on the machine.
TEST(ThreadPool, RefusesMoreThanTheLimit) {
  try {
    ThreadPool pool(ThreadPool::kMaxThreads + 1);
    ADD_FAILURE() << "a pool above the limit was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1025 threads requested, more than the limit of 1024"), std::string::npos)
        << e.what();
  }
}

// Issue #19: when the OS refused a thread, the constructor threw with workers running and the
// process hung forever. Now it stops them and says how many it got. Run in a child whose address
// space is capped just above its current size, so thread stacks soon cannot be mapped; an alarm
// turns a hang into a failure. (Sanitizer runtimes need address space of their own and would
// fail first, so this runs in the plain build only.)
TEST(ThreadPool, OsRefusingAThreadIsAnErrorNotAHang) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "needs an address-space limit, which the sanitizer runtime does not survive";
#else
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);
    long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (96u << 20);
    const struct rlimit lim{cap, cap};
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(10);
    try {
      ThreadPool pool(ThreadPool::kMaxThreads);  // 1023 stacks of several MB each cannot fit
      ::_exit(11);
    } catch (const Error& e) {
      ::_exit(std::strstr(e.what(), "could only start") ? 0 : 12);
    } catch (...) {
      ::_exit(13);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status) << " (14 = the alarm: a hang)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no limit set, 11: no thread refused, 12: another error, 13: not plumb::Error";
#endif
}

}  // namespace
}  // namespace plumb
