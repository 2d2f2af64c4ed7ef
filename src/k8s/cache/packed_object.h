#pragma once

// How the informer's cache keeps an object: packed into one immutable byte
// buffer (CBOR, RFC 8949) instead of as a parsed nlohmann::json tree, and
// unpacked into a tree again when someone reads it. Defines: ObjectPtr,
// PackedObject, PackedPtr, PackJson(), UnpackJson().
//
// Why: a parsed tree costs about nine times the object's JSON text (a
// 3.2 KB ResourceSlice is a 29 KB tree: a std::map node and a std::string
// per key and value), which made a 10,000-slice cache weigh as much as
// client-go's. Packed, the same slice takes 2.6 KB. The price is an unpack
// (about one tree copy) per object read; the cache avoids it where it can:
// while someone still holds the tree a PackedObject was made from,
// Unpack() returns that same tree.
//
// Ownership: a PackedObject owns its bytes and watches (weakly) the tree it
// was packed from. Thread-safety: immutable after construction; any number
// of threads may call its const members at once.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nvdra::k8s::cache {

// An immutable snapshot of one object, shared between the cache and readers.
using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// `object` as CBOR: definite lengths, object keys in nlohmann::json's order
// (sorted), integers in their shortest form, every float as a double. Any
// CBOR reader, nlohmann::json::from_cbor included, reads it back as `object`.
std::string PackJson(const nlohmann::json& object);
// The tree of bytes made by PackJson. A malformed buffer is a programmer
// error (packed bytes never come from outside the process) and aborts.
nlohmann::json UnpackJson(std::string_view packed);

class PackedObject {
 public:
  // Packs `object` and remembers it weakly: Unpack() hands out this same
  // snapshot for as long as any reader still holds it. Null aborts.
  explicit PackedObject(const ObjectPtr& object);
  // Packs `object`; nothing to share, so every Unpack() decodes.
  explicit PackedObject(const nlohmann::json& object);
  PackedObject(const PackedObject&) = delete;
  PackedObject& operator=(const PackedObject&) = delete;

  // The object: the tree it was packed from while that is still alive,
  // else a fresh tree decoded from the bytes. Never null.
  ObjectPtr Unpack() const;

  // metadata.resourceVersion, kept unpacked so version checks cost nothing;
  // empty when absent.
  const std::string& resource_version() const { return resource_version_; }
  std::string_view bytes() const { return {bytes_.get(), size_}; }
  // Same bytes: the same JSON value (the encoding is deterministic).
  bool SameContent(const PackedObject& other) const { return bytes() == other.bytes(); }

 private:
  void Pack(const nlohmann::json& object);

  // Exactly size_ bytes: a std::string would keep its growth slack.
  std::unique_ptr<char[]> bytes_;
  std::size_t size_ = 0;
  std::string resource_version_;
  const std::weak_ptr<const nlohmann::json> live_;
};

using PackedPtr = std::shared_ptr<const PackedObject>;

}  // namespace nvdra::k8s::cache
