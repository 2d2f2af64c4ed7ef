// Deliberately wrong, and part of no build target: a GUARDED_BY member read
// without its mutex, and a REQUIRES helper called without it. ctest
// unit.thread_safety_analysis_rejects_unguarded_access runs
// scripts/check-thread-safety on this file and passes only if clang rejects it
// with thread-safety errors, which shows that the check over src/ can fail.

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace nvdra::common::thread_safety_negative {

class Counter {
 public:
  void Increment() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    IncrementLocked();
  }

  // Error: reading variable 'count_' requires holding mutex 'mu_'.
  int UnguardedRead() const { return count_; }

  // Error: calling function 'IncrementLocked' requires holding mutex 'mu_'.
  void UnguardedIncrement() { IncrementLocked(); }

 private:
  void IncrementLocked() REQUIRES(mu_) { ++count_; }

  mutable Mutex mu_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace nvdra::common::thread_safety_negative
