#pragma once

// Process-wide allocator settings for the long-running binaries.
// Thread-safety: call once from main before starting threads.

namespace nvdra::common {

// Limits glibc malloc to one arena. By default glibc gives each new thread
// its own arena (up to 8 per core), and the gRPC, curl and informer threads
// each keep a few hundred KiB of freed memory in theirs: a kubelet plugin's
// private memory grew from 3.8 to 5.1 MiB over its first few hundred prepares
// (bench: plugin-prepare-bench). With one arena it stays flat; the plugins'
// few concurrent allocations do not contend measurably. MALLOC_ARENA_MAX in
// the environment still wins, for experiments.
void LimitMallocArenas();

}  // namespace nvdra::common
