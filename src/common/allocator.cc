#include "common/allocator.h"

#include <malloc.h>

#include <cstdlib>

namespace nvdra::common {

void LimitMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return;
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace nvdra::common
