#pragma once

// Mutex and MutexLock (exclusive), SharedMutex with WriterLock and ReaderLock
// (reader/writer): std::mutex and std::shared_mutex wrapped so that Clang's
// thread-safety analysis can check them (common/thread_annotations.h).
// libstdc++'s own types carry no annotations, so members guarded by them
// would go unchecked. Same behaviour and cost as the std types they wrap.
//
// Usage:
//   mutable common::Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void Add() EXCLUDES(mu_) { common::MutexLock lock(mu_); ++count_; }
//
// Condition variables: a MutexLock hands out the std::unique_lock it holds
// (native()) for std::condition_variable and std::condition_variable_any
// waits. The analysis cannot see that a wait's predicate runs with the mutex
// held, so a predicate that reads guarded members starts with
// `mu_.AssertHeld();` (which checks nothing at run time), or is written as
// `[&]() REQUIRES(mu_) { ... }`.
//
// Ownership: a lock borrows its mutex, which must outlive it. Locks are
// neither copyable nor movable: one lives in one scope.
// Thread-safety: the mutexes are thread-safe; a lock object is confined to
// the thread that made it.

#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace nvdra::common {

// An exclusive, non-recursive mutex. Lockable, so std::scoped_lock and
// std::condition_variable_any accept it too (unchecked by the analysis).
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that this mutex is held where it cannot see it (a
  // condition-variable predicate, a callback run under the lock). Checks
  // nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock() and Lock() let a scope drop the mutex
// around slow work and take it back; the destructor releases it only if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // The std::unique_lock this object holds, for condition-variable waits
  // (which release and retake it before returning). Do not unlock it by hand.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// A reader/writer mutex: one writer, or any number of readers.
class CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) { return mu_.try_lock_shared(); }

  void AssertHeld() const ASSERT_CAPABILITY(this) {}
  void AssertReaderHeld() const ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace nvdra::common
