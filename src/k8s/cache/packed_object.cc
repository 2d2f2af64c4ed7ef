#include "k8s/cache/packed_object.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/json_fields.h"

namespace nvdra::k8s::cache {
namespace {

using nlohmann::json;

// CBOR major types (RFC 8949 section 3.1).
constexpr std::uint8_t kUnsigned = 0;
constexpr std::uint8_t kNegative = 1;
constexpr std::uint8_t kBytes = 2;
constexpr std::uint8_t kText = 3;
constexpr std::uint8_t kArray = 4;
constexpr std::uint8_t kMap = 5;
constexpr std::uint8_t kSimple = 7;
// Major type 7 values.
constexpr char kFalse = static_cast<char>(0xf4);
constexpr char kTrue = static_cast<char>(0xf5);
constexpr char kNull = static_cast<char>(0xf6);
constexpr char kFloat64 = static_cast<char>(0xfb);

[[noreturn]] void Corrupt(const char* what) {
  std::fprintf(stderr, "cache::PackedObject: corrupt packed object (%s)\n", what);
  std::abort();
}

// Writes directly into a std::string: nlohmann's to_cbor goes through an
// output adapter call per byte and costs about twice as much.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void Value(const json& value) {
    switch (value.type()) {
      case json::value_t::null:
      case json::value_t::discarded:
        out_.push_back(kNull);
        return;
      case json::value_t::boolean:
        out_.push_back(value.get<bool>() ? kTrue : kFalse);
        return;
      case json::value_t::number_unsigned:
        Head(kUnsigned, value.get<std::uint64_t>());
        return;
      case json::value_t::number_integer: {
        const auto v = value.get<std::int64_t>();
        // -1 - v, computed without overflow: the bitwise complement.
        if (v >= 0) Head(kUnsigned, static_cast<std::uint64_t>(v));
        else Head(kNegative, ~static_cast<std::uint64_t>(v));
        return;
      }
      case json::value_t::number_float: {
        out_.push_back(kFloat64);
        BigEndian(std::bit_cast<std::uint64_t>(value.get<double>()), 8);
        return;
      }
      case json::value_t::string: {
        const auto& s = value.get_ref<const std::string&>();
        Head(kText, s.size());
        out_.append(s);
        return;
      }
      case json::value_t::binary: {
        // Never produced by parsing JSON text; kept without its subtype.
        const auto& b = value.get_binary();
        Head(kBytes, b.size());
        out_.append(reinterpret_cast<const char*>(b.data()), b.size());
        return;
      }
      case json::value_t::array: {
        const auto& a = value.get_ref<const json::array_t&>();
        Head(kArray, a.size());
        for (const json& element : a) Value(element);
        return;
      }
      case json::value_t::object: {
        const auto& o = value.get_ref<const json::object_t&>();
        Head(kMap, o.size());
        for (const auto& [key, element] : o) {
          Head(kText, key.size());
          out_.append(key);
          Value(element);
        }
        return;
      }
    }
  }

 private:
  void Head(std::uint8_t major, std::uint64_t argument) {
    const auto m = static_cast<char>(major << 5);
    if (argument < 24) {
      out_.push_back(static_cast<char>(m | static_cast<char>(argument)));
    } else if (argument <= 0xff) {
      out_.push_back(static_cast<char>(m | 24));
      BigEndian(argument, 1);
    } else if (argument <= 0xffff) {
      out_.push_back(static_cast<char>(m | 25));
      BigEndian(argument, 2);
    } else if (argument <= 0xffffffffULL) {
      out_.push_back(static_cast<char>(m | 26));
      BigEndian(argument, 4);
    } else {
      out_.push_back(static_cast<char>(m | 27));
      BigEndian(argument, 8);
    }
  }

  void BigEndian(std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }

  std::string& out_;
};

// Reads what Writer wrote, building the tree in place (object members are
// appended at the end of their std::map: the keys arrive sorted).
class Reader {
 public:
  explicit Reader(std::string_view in)
      : p_(reinterpret_cast<const std::uint8_t*>(in.data())), end_(p_ + in.size()) {}

  void Value(json& out) {
    if (p_ == end_) Corrupt("truncated");
    const std::uint8_t initial = *p_++;
    const std::uint8_t major = initial >> 5;
    const std::uint8_t info = initial & 31;
    switch (major) {
      case kUnsigned:
        out = Argument(info);
        return;
      case kNegative:
        out = static_cast<std::int64_t>(~Argument(info));
        return;
      case kText: {
        const std::string_view s = Span(Argument(info));
        out = std::string(s);
        return;
      }
      case kBytes: {
        const std::string_view s = Span(Argument(info));
        out = json::binary(std::vector<std::uint8_t>(s.begin(), s.end()));
        return;
      }
      case kArray: {
        const std::uint64_t n = Argument(info);
        if (n > static_cast<std::uint64_t>(end_ - p_)) Corrupt("array length");
        out = json::array();
        auto& a = out.get_ref<json::array_t&>();
        a.resize(n);
        for (json& element : a) Value(element);
        return;
      }
      case kMap: {
        const std::uint64_t n = Argument(info);
        if (n > static_cast<std::uint64_t>(end_ - p_)) Corrupt("map length");
        out = json::object();
        auto& o = out.get_ref<json::object_t&>();
        for (std::uint64_t i = 0; i < n; ++i) {
          if (p_ == end_ || (*p_ >> 5) != kText) Corrupt("map key");
          const std::uint8_t key_info = *p_++ & 31;
          const std::string_view key = Span(Argument(key_info));
          auto it = o.emplace_hint(o.end(), std::string(key), nullptr);
          Value(it->second);
        }
        return;
      }
      case kSimple:
        switch (static_cast<char>(initial)) {
          case kFalse: out = false; return;
          case kTrue: out = true; return;
          case kNull: out = nullptr; return;
          case kFloat64: out = std::bit_cast<double>(Fixed(8)); return;
          default: Corrupt("simple value");
        }
      default:
        Corrupt("major type");
    }
  }

  bool done() const { return p_ == end_; }

 private:
  std::uint64_t Argument(std::uint8_t info) {
    if (info < 24) return info;
    switch (info) {
      case 24: return Fixed(1);
      case 25: return Fixed(2);
      case 26: return Fixed(4);
      case 27: return Fixed(8);
      default: Corrupt("argument");
    }
  }

  std::uint64_t Fixed(int bytes) {
    if (end_ - p_ < bytes) Corrupt("truncated number");
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | *p_++;
    return v;
  }

  std::string_view Span(std::uint64_t n) {
    if (n > static_cast<std::uint64_t>(end_ - p_)) Corrupt("truncated string");
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

  const std::uint8_t* p_;
  const std::uint8_t* const end_;
};

}  // namespace

std::string PackJson(const json& object) {
  std::string out;
  Writer(out).Value(object);
  return out;
}

json UnpackJson(std::string_view packed) {
  Reader reader(packed);
  json out;
  reader.Value(out);
  if (!reader.done()) Corrupt("trailing bytes");
  return out;
}

PackedObject::PackedObject(const ObjectPtr& object) : live_(object) {
  if (object == nullptr) {
    std::fprintf(stderr, "cache::PackedObject: null object\n");
    std::abort();
  }
  Pack(*object);
}

PackedObject::PackedObject(const json& object) { Pack(object); }

void PackedObject::Pack(const json& object) {
  // One scratch buffer per thread: the writer's growth happens there once,
  // and the object keeps only an exact-size copy.
  thread_local std::string scratch;
  scratch.clear();
  Writer(scratch).Value(object);
  size_ = scratch.size();
  bytes_ = std::make_unique_for_overwrite<char[]>(size_);
  std::memcpy(bytes_.get(), scratch.data(), size_);
  resource_version_ = common::JsonString(object, {"metadata", "resourceVersion"});
  // A scratch buffer grown by one huge object is not kept for good.
  if (scratch.capacity() > (1u << 20)) std::string().swap(scratch);
}

ObjectPtr PackedObject::Unpack() const {
  if (ObjectPtr live = live_.lock()) return live;
  auto object = std::make_shared<json>();
  Reader reader(bytes());
  reader.Value(*object);
  if (!reader.done()) Corrupt("trailing bytes");
  return object;
}

}  // namespace nvdra::k8s::cache
