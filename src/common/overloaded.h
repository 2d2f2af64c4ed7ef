#pragma once

// Overloaded{lambdas...}: one callable out of several, for std::visit over a
// std::variant, so that a variant alternative no lambda takes fails to
// compile.
//
// Thread-safety: a type; no state.

namespace nvdra::common {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};

}  // namespace nvdra::common
