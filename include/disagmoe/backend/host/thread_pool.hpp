// SPDX-License-Identifier: Apache-2.0
/// @file thread_pool.hpp
/// `host::ThreadPool`: persistent worker threads for the host kernels, so a kernel call
/// costs a wake-up, not a thread start (~20 us each). Fork-join: `run(tasks, body)`
/// calls body(0 .. tasks-1) on the workers and on the calling thread and returns when
/// all are done. Callers on many threads may share one pool: the caller works on its
/// own job too, so every job finishes even when every worker is busy elsewhere.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace disagmoe::host {

class ThreadPool {
 public:
  /// Starts `workers` threads (0: the caller does all the work).
  explicit ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { serve(); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  /// Joins the workers (no job may be running).
  ~ThreadPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    threads_.clear();
  }

  /// Worker threads (not counting callers).
  int workers() const { return static_cast<int>(threads_.size()); }

  /// The process-wide pool: one worker per hardware thread but one (the caller is the
  /// last), created on first use.
  static ThreadPool& shared() {
    static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
    return pool;
  }

  /// Calls body(i) for every i in [0, tasks), each exactly once, and returns when all
  /// returned. Rethrows the first exception a task threw (the other tasks still run).
  template <class Body>
  void run(std::size_t tasks, Body&& body) {
    if (tasks == 0) return;
    Job job;
    job.tasks = tasks;
    job.ctx = &body;
    job.call = [](void* ctx, std::size_t i) { (*static_cast<std::remove_reference_t<Body>*>(ctx))(i); };
    {
      std::lock_guard lock(mu_);
      if (tasks > 1 && !threads_.empty()) jobs_.push_back(&job);
    }
    if (tasks > 1) work_cv_.notify_all();
    std::unique_lock lock(mu_);
    for (std::size_t i; (i = claim(job)) < tasks;) execute(job, i, lock);
    done_cv_.wait(lock, [&] { return job.done == job.tasks; });
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    std::size_t tasks = 0, next = 0, done = 0;  // guarded by mu_
    void* ctx = nullptr;
    void (*call)(void*, std::size_t) = nullptr;
    std::exception_ptr error;
  };

  /// Next task of `job` (mu_ held); the job leaves the queue with its last task.
  std::size_t claim(Job& job) {
    const std::size_t i = job.next < job.tasks ? job.next++ : job.tasks;
    if (job.next == job.tasks) {
      const auto it = std::find(jobs_.begin(), jobs_.end(), &job);
      if (it != jobs_.end()) jobs_.erase(it);
    }
    return i;
  }

  /// Runs task i with mu_ released; its completion is the last touch of `job`.
  void execute(Job& job, std::size_t i, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    std::exception_ptr error;
    try {
      job.call(job.ctx, i);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !job.error) job.error = error;
    if (++job.done == job.tasks) done_cv_.notify_all();
  }

  void serve() {
    std::unique_lock lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      Job& job = *jobs_.front();
      execute(job, claim(job), lock);
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job*> jobs_;
  bool stop_ = false;
  std::vector<std::jthread> threads_;  // last member: joined before the rest is destroyed
};

}  // namespace disagmoe::host
