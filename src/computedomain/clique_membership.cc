#include "computedomain/clique_membership.h"

#include <utility>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/daemon_metrics.h"

namespace nvdra::computedomain {
namespace {

using common::JsonString;
using common::Status;
using nlohmann::json;

// How often RemoveEntry re-reads after a failed test before giving up.
constexpr int kRemoveAttempts = 5;

// Where the list is and what its key is called.
const json* EntryList(const json& object, MembershipStore store) {
  const json* list = &object;
  if (store == MembershipStore::kComputeDomainStatus) {
    auto status = object.find("status");
    if (status == object.end() || !status->is_object()) return nullptr;
    list = &*status;
  }
  auto entries = list->find(store == MembershipStore::kClique ? "daemons" : "nodes");
  return entries != list->end() && entries->is_array() ? &*entries : nullptr;
}
const char* KeyField(MembershipStore store) { return store == MembershipStore::kClique ? "nodeName" : "name"; }
std::string ListPointer(MembershipStore store) {
  return store == MembershipStore::kClique ? "/daemons" : "/status/nodes";
}

}  // namespace

std::string CapStatusMessage(std::string message) {
  if (message.size() <= kMaxStatusMessageBytes) return message;
  std::size_t cut = kMaxStatusMessageBytes - 3;
  // Not inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  message.resize(cut);
  return message + "...";
}

std::vector<CliqueMember> CliqueMembers(const json& object, MembershipStore store) {
  std::vector<CliqueMember> out;
  const json* daemons = EntryList(object, store);
  if (daemons == nullptr) return out;
  for (const json& entry : *daemons) {
    if (!entry.is_object()) continue;
    CliqueMember member;
    member.node_name = JsonString(entry, KeyField(store));
    if (member.node_name.empty()) continue;
    member.ip_address = JsonString(entry, "ipAddress");
    member.clique_id = JsonString(entry, "cliqueID");
    member.status = JsonString(entry, "status");
    member.reason = JsonString(entry, "reason");
    member.message = JsonString(entry, "message");
    if (auto index = entry.find("index"); index != entry.end() && index->is_number_integer()) {
      member.index = index->get<std::int64_t>();
    }
    out.push_back(std::move(member));
  }
  return out;
}

CliqueMembership::CliqueMembership(k8s::Client& client, DaemonIdentity identity, MembershipStore store,
                                   std::string cd_name, std::string cd_namespace, DaemonMetrics* metrics)
    : client_(client),
      identity_(std::move(identity)),
      store_(store),
      object_name_(store == MembershipStore::kClique ? identity_.compute_domain_uid + "." + identity_.clique_id
                                                      : std::move(cd_name)),
      object_namespace_(store == MembershipStore::kClique ? identity_.pod_namespace : std::move(cd_namespace)),
      metrics_(metrics) {}

const Status& CliqueMembership::Counted(std::string_view verb, const Status& status) const {
  if (metrics_ != nullptr && !status.ok() && status.code() != common::StatusCode::kCancelled) {
    metrics_->CountApiError(verb);
  }
  return status;
}

const k8s::ResourceRef& CliqueMembership::resource() const {
  return store_ == MembershipStore::kClique ? k8s::resources::kComputeDomainCliques
                                            : k8s::resources::kComputeDomains;
}

std::string CliqueMembership::field_manager() const {
  // Status store: server-side apply needs one manager per daemon (each owns
  // only its entry). Clique store: patches of its own pod.
  return store_ == MembershipStore::kClique ? "compute-domain-daemon"
                                            : "compute-domain-daemon@" + identity_.node_name;
}

Status CliqueMembership::LabelPod(std::stop_token stop) {
  const json patch = {{"metadata", {{"labels", {{std::string(kComputeDomainCliqueLabel), identity_.clique_id}}}}}};
  auto result = client_.Patch(k8s::resources::kPods, identity_.pod_namespace, identity_.pod_name,
                              k8s::PatchType::kMerge, patch, {}, stop);
  return Counted("patch", result.status());
}

k8s::ApiResult<json> CliqueMembership::ApplyStatusEntry(const DaemonStatus& status, std::stop_token stop) {
  json entry = {{"name", identity_.node_name},
                {"ipAddress", identity_.pod_ip},
                {"cliqueID", identity_.clique_id},
                {"status", status.status}};
  // Left out when empty: server-side apply then removes what this manager
  // set before.
  if (!status.reason.empty()) entry["reason"] = status.reason;
  if (!status.message.empty()) entry["message"] = CapStatusMessage(status.message);
  json intent = {{"apiVersion", "resource.nvidia.com/v1beta1"},
                 {"kind", "ComputeDomain"},
                 {"metadata", {{"name", object_name_}, {"namespace", object_namespace_}}},
                 {"status", {{"nodes", json::array({std::move(entry)})}}}};
  k8s::PatchOptions options;
  options.field_manager = field_manager();
  // force: the entry is this node's by its key; a previous daemon on this
  // node that wrote it with another manager (an upgrade from a driver that
  // used Update) must not block us. The index is not in the intent, so
  // forcing cannot take it from the index writer.
  options.force = true;
  options.subresource = "status";
  auto result = client_.Apply(resource(), object_namespace_, intent, options, stop);
  Counted("apply", result.status());
  return result;
}

k8s::ApiResult<json> CliqueMembership::Publish(const DaemonStatus& status, std::stop_token stop) {
  if (store_ == MembershipStore::kComputeDomainStatus) return ApplyStatusEntry(status, stop);
  // null removes an annotation in a merge patch (absent already: no-op).
  const auto optional = [](const std::string& value) { return value.empty() ? json(nullptr) : json(value); };
  json annotations = {{std::string(kDaemonStatusAnnotation), status.status},
                      {std::string(kDaemonStatusReasonAnnotation), optional(status.reason)},
                      {std::string(kDaemonStatusMessageAnnotation), optional(CapStatusMessage(status.message))}};
  if (!identity_.pod_ip.empty()) annotations[std::string(kDaemonIpAnnotation)] = identity_.pod_ip;
  const json patch = {{"metadata",
                       {{"labels", {{std::string(kComputeDomainCliqueLabel), identity_.clique_id}}},
                        {"annotations", std::move(annotations)}}}};
  k8s::PatchOptions options;
  options.field_manager = field_manager();
  auto result = client_.Patch(k8s::resources::kPods, identity_.pod_namespace, identity_.pod_name,
                              k8s::PatchType::kMerge, patch, options, stop);
  Counted("patch", result.status());
  return result;
}

Status CliqueMembership::Leave(std::stop_token stop) {
  // Clique store: the controller drops the entry once the pod terminates;
  // until then (a container restart) the daemon is simply not ready.
  if (store_ == MembershipStore::kClique) return Publish(kDaemonNotReady, stop).status();
  for (int attempt = 1;; ++attempt) {
    auto object = client_.Get(resource(), object_namespace_, object_name_, {}, stop);
    if (k8s::IsNotFound(object.status())) return common::OkStatus();
    Counted("get", object.status());
    if (!object.ok()) return object.status();
    const json* daemons = EntryList(*object, store_);
    std::optional<size_t> position;
    for (size_t i = 0; daemons != nullptr && daemons->is_array() && i < daemons->size(); ++i) {
      const json& entry = (*daemons)[i];
      if (entry.is_object() && JsonString(entry, KeyField(store_)) == identity_.node_name &&
          JsonString(entry, "ipAddress") == identity_.pod_ip) {
        position = i;
        break;
      }
    }
    if (!position) return common::OkStatus();
    const std::string path = fmt::format("{}/{}", ListPointer(store_), *position);
    k8s::PatchOptions options;
    options.field_manager = field_manager();
    if (store_ == MembershipStore::kComputeDomainStatus) options.subresource = "status";
    const json patch =
        json::array({{{"op", "test"}, {"path", path + "/" + KeyField(store_)}, {"value", identity_.node_name}},
                                    {{"op", "test"}, {"path", path + "/ipAddress"}, {"value", identity_.pod_ip}},
                                    {{"op", "remove"}, {"path", path}}});
    auto result = client_.Patch(resource(), object_namespace_, object_name_,
                                k8s::PatchType::kJson, patch, options, stop);
    if (result.ok() || k8s::IsNotFound(result.status())) return common::OkStatus();
    Counted("patch", result.status());
    // A failed test op is 422 (kInvalidArgument); the list moved under us.
    if (!k8s::IsInvalid(result.status()) && !k8s::IsConflict(result.status())) return result.status();
    if (attempt >= kRemoveAttempts) return result.status();
    LOG_INFO(3, "clique changed while leaving it; reading it again",
             {{"object", object_name_}, {"err", result.status()}});
  }
}

}  // namespace nvdra::computedomain
