#pragma once

// ShutdownSignals: turns SIGINT and SIGTERM into a stop request that mains and
// the objects they build can wait on, so a binary stops in order.
//
// No work happens in a signal handler: the signals are blocked and read from
// a signalfd by a watcher thread, so the reaction (request the stop, log) is
// ordinary code. The first signal requests the stop; a second one means the
// orderly stop is taking too long and forces an exit (128 + signal number,
// as a shell reports a signal death).
//
// Ownership: owns the signalfd, an eventfd used to wake the watcher, and the
// watcher thread, which it joins on destruction. At most one instance exists at
// a time. Construct it in main before starting other threads (they inherit the
// blocked mask; a thread that does not block SIGTERM would take the default
// action instead), and destroy it on the same thread.
// Thread-safety: thread-safe (token, RequestStop, WaitForShutdown and
// received_signal may be called from any thread).

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <stop_token>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::common {

class ShutdownSignals {
 public:
  // Called on the watcher thread for the second signal. The default logs and
  // calls _exit(128 + signal); tests pass their own.
  using ForceExit = std::function<void(int signal_number)>;

  // Blocks SIGINT and SIGTERM in the calling thread and starts watching them.
  // kFailedPrecondition if another instance exists; errno-mapped codes if the
  // signalfd or eventfd cannot be created.
  static StatusOr<std::unique_ptr<ShutdownSignals>> Install(ForceExit on_second_signal = {});

  // Stops and joins the watcher, then restores the calling thread's previous
  // signal mask. A SIGTERM arriving after that takes the default action.
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Fires on the first SIGINT/SIGTERM or on RequestStop.
  [[nodiscard]] std::stop_token token() const { return stop_source_.get_token(); }

  // Requests the stop without a signal (a fatal error elsewhere, tests).
  void RequestStop();

  // Blocks until the stop is requested. Returns the signal that caused it, or
  // 0 when RequestStop did.
  int WaitForShutdown();

  // The first signal received, or 0 if none yet.
  [[nodiscard]] int received_signal() const { return signal_.load(); }

 private:
  // Only Install() can construct (it checks for a second instance first).
  struct InstallKey {
    explicit InstallKey() = default;
  };

 public:
  ShutdownSignals(InstallKey key, UniqueFd signal_fd, UniqueFd wake_fd,
                  const sigset_t& previous_mask, ForceExit on_second_signal);

 private:
  void Watch(const std::stop_token& watcher_stop);

  // Constant after construction.
  UniqueFd signal_fd_;
  UniqueFd wake_fd_;
  sigset_t previous_mask_;
  ForceExit on_second_signal_;

  // Provide their own synchronization.
  std::stop_source stop_source_;
  std::atomic<int> signal_{0};
  Mutex wait_mutex_;  // guards no data: WaitForShutdown's condition variable needs one
  std::condition_variable_any wait_cv_;

  // Last: stopped and joined before the members it uses are destroyed.
  std::jthread watcher_;
};

}  // namespace nvdra::common
