#pragma once

// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// so that `clang -Wthread-safety` checks at compile time that guarded members
// are only touched with their mutex held. Defines the macros CAPABILITY,
// SCOPED_CAPABILITY, GUARDED_BY, PT_GUARDED_BY, ACQUIRED_BEFORE, ACQUIRED_AFTER,
// REQUIRES, REQUIRES_SHARED, ACQUIRE, ACQUIRE_SHARED, RELEASE, RELEASE_SHARED,
// RELEASE_GENERIC, TRY_ACQUIRE, TRY_ACQUIRE_SHARED, EXCLUDES, ASSERT_CAPABILITY,
// ASSERT_SHARED_CAPABILITY, RETURN_CAPABILITY and NO_THREAD_SAFETY_ANALYSIS.
//
// Under clang they expand to the attributes; under any other compiler (g++
// builds the product) to nothing, so they cost nothing at run time. The mutex
// types that carry them are in common/mutex.h: libstdc++'s std::mutex is not
// annotated, so guarding a member with one would not be checked.
//
// gRPC's headers bring abseil's absl/base/internal/thread_annotations.h, which
// defines GUARDED_BY, PT_GUARDED_BY, ACQUIRED_BEFORE, ACQUIRED_AFTER and
// NO_THREAD_SAFETY_ANALYSIS with the same meaning; those five are defined
// here only if absent, so either header may come first.
//
// Ownership: none (macros only). Thread-safety: not applicable.

#if defined(__clang__)
#define NVDRA_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define NVDRA_THREAD_ANNOTATION_(x)
#endif

// On a class: objects of it are capabilities (mutexes), named `x` in diagnostics.
#define CAPABILITY(x) NVDRA_THREAD_ANNOTATION_(capability(x))
// On a class: an RAII object that acquires in its constructor and releases in
// its destructor.
#define SCOPED_CAPABILITY NVDRA_THREAD_ANNOTATION_(scoped_lockable)

// On a data member: reading it needs `x` held shared, writing it needs `x` exclusive.
#ifndef GUARDED_BY
#define GUARDED_BY(x) NVDRA_THREAD_ANNOTATION_(guarded_by(x))
#endif
// On a pointer member: the pointee (not the pointer) is guarded by `x`.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) NVDRA_THREAD_ANNOTATION_(pt_guarded_by(x))
#endif

// On a mutex member: lock ordering (checked only with -Wthread-safety-beta).
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) NVDRA_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) NVDRA_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#endif

// On a function: the caller must hold the capabilities, exclusively or shared.
#define REQUIRES(...) NVDRA_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) NVDRA_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))

// On a function: it acquires / releases the capabilities (none named: `this`).
#define ACQUIRE(...) NVDRA_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) NVDRA_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) NVDRA_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) NVDRA_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) NVDRA_THREAD_ANNOTATION_(release_generic_capability(__VA_ARGS__))

// On a function: it acquires the capabilities when it returns `result`.
#define TRY_ACQUIRE(...) NVDRA_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) NVDRA_THREAD_ANNOTATION_(try_acquire_shared_capability(__VA_ARGS__))

// On a function: the caller must not hold the capabilities (the function takes
// them itself; a non-recursive mutex would deadlock).
#define EXCLUDES(...) NVDRA_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// On a function: it aborts (or is a no-op in release builds) unless the
// capability is held; afterwards the analysis assumes it is.
#define ASSERT_CAPABILITY(x) NVDRA_THREAD_ANNOTATION_(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) NVDRA_THREAD_ANNOTATION_(assert_shared_capability(x))

// On a function: it returns a reference to the capability `x`.
#define RETURN_CAPABILITY(x) NVDRA_THREAD_ANNOTATION_(lock_returned(x))

// On a function: the analysis skips its body. Each use says why in a comment.
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS NVDRA_THREAD_ANNOTATION_(no_thread_safety_analysis)
#endif
