// Canaries for the sanitized trees: each mode commits one bug the sanitizer
// of its tree must report (test/sanitize/tests.cmake runs them through
// `scripts/sanitize expect`). They show the checks can fail: a tree built
// without instrumentation, or a run whose reports go nowhere, fails them.
//
//   sanitize_canary heap-use-after-free | signed-overflow | leak   (address tree)
//   sanitize_canary data-race                                      (thread tree)

#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <thread>

namespace {

// volatile: the bug must survive into the program as written.
int UseAfterFree() {
  auto* value = new int(7);
  delete value;
  return *static_cast<volatile int*>(value);
}

int SignedOverflow(int argc) {
  volatile int big = std::numeric_limits<int>::max();
  return big + argc;  // argc >= 1
}

int Leak() {
  auto* lost = new char[64];
  std::memset(lost, 1, 64);
  lost = nullptr;
  return 0;
}

int DataRace() {
  static int counter = 0;
  std::thread writer([] { counter += 1; });
  counter += 2;
  writer.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "heap-use-after-free") return UseAfterFree() == 7 ? 0 : 0;
  if (mode == "signed-overflow") return SignedOverflow(argc) < 0 ? 0 : 0;
  if (mode == "leak") return Leak();
  if (mode == "data-race") return DataRace();
  std::fprintf(stderr, "sanitize_canary: unknown mode '%.*s'\n", static_cast<int>(mode.size()), mode.data());
  return 2;
}
