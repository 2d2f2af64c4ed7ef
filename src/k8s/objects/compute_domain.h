#pragma once

// Typed views of the driver's CRDs (resource.nvidia.com/v1beta1):
// ComputeDomain (spec.numNodes, spec.channel, status.status,
// status.imexChannelID, status.nodes[] with our optional reason/message)
// and ComputeDomainClique (top-level daemons[], no spec or status).
// Fields per upstream-inventory.md sections 2.5 and 2.6. See object.h.
// Ownership: values. Thread-safety: thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client.h"
#include "k8s/objects/object.h"

namespace nvdra::k8s {

// What a ComputeDomain's status.nodes[i] and a clique's daemons[i] both say
// about one node's IMEX daemon.
class DaemonInfoView : public JsonView {
 public:
  using JsonView::JsonView;
  std::string ip_address() const { return GetString({"ipAddress"}); }
  void set_ip_address(std::string_view value) { Set({"ipAddress"}, value); }
  std::string clique_id() const { return GetString({"cliqueID"}); }
  void set_clique_id(std::string_view value) { Set({"cliqueID"}, value); }
  // -1 for a node without fabric (and when absent).
  std::int64_t index() const { return GetInt({"index"}, -1); }
  void set_index(std::int64_t value) { Set({"index"}, value); }
  std::string status() const { return GetString({"status"}); }  // Ready, NotReady
  void set_status(std::string_view value) { Set({"status"}, value); }
  // Ours, optional (upstream's objects and old ones lack them: ""): why the
  // daemon is NotReady ("FabricUnhealthy") and a message for people.
  std::string reason() const { return GetString({"reason"}); }
  void set_reason(std::string_view value) { Set({"reason"}, value); }
  std::string message() const { return GetString({"message"}); }
  void set_message(std::string_view value) { Set({"message"}, value); }
};

// status.nodes[i] of a ComputeDomain, keyed by name.
class ComputeDomainNode : public DaemonInfoView {
 public:
  using DaemonInfoView::DaemonInfoView;
  std::string name() const { return GetString({"name"}); }
  void set_name(std::string_view value) { Set({"name"}, value); }
};

class ComputeDomain : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.nvidia.com/v1beta1";
  static constexpr char kKind[] = "ComputeDomain";
  static const ResourceRef& Resource() { return resources::kComputeDomains; }
  static std::vector<ShapeRule> ShapeRules();
  static ComputeDomain New(std::string_view ns, std::string_view name) {
    return ComputeDomain(NewJson(kApiVersion, kKind, name, ns));
  }
  using Object::Object;

  std::int64_t num_nodes() const { return GetInt({"spec", "numNodes"}); }
  void set_num_nodes(std::int64_t value) { Set({"spec", "numNodes"}, value); }
  std::string channel_resource_claim_template_name() const {
    return GetString({"spec", "channel", "resourceClaimTemplate", "name"});
  }
  void set_channel_resource_claim_template_name(std::string_view value) {
    Set({"spec", "channel", "resourceClaimTemplate", "name"}, value);
  }
  // "All" or "Single"; the CRD's default "Single" when absent.
  std::string channel_allocation_mode() const;
  void set_channel_allocation_mode(std::string_view value) { Set({"spec", "channel", "allocationMode"}, value); }
  // "Ready" or "NotReady"; the CRD's default "NotReady" when absent.
  std::string status() const;
  void set_status(std::string_view value) { Set({"status", "status"}, value); }
  // status.status exactly as written; "" when absent (where status()
  // would read the CRD's default).
  std::string status_as_written() const { return GetString({"status", "status"}); }
  // status.imexChannelID (channel isolation); nullopt when absent.
  std::optional<std::int64_t> imex_channel_id() const { return GetOptionalInt({"status", "imexChannelID"}); }
  void set_imex_channel_id(std::int64_t value) { Set({"status", "imexChannelID"}, value); }
  std::vector<ComputeDomainNode> nodes() const { return GetList<ComputeDomainNode>({"status", "nodes"}); }
  void set_nodes(const std::vector<ComputeDomainNode>& value) { SetList({"status", "nodes"}, value); }
};

// daemons[i] of a ComputeDomainClique, keyed by nodeName.
class CliqueDaemon : public DaemonInfoView {
 public:
  using DaemonInfoView::DaemonInfoView;
  std::string node_name() const { return GetString({"nodeName"}); }
  void set_node_name(std::string_view value) { Set({"nodeName"}, value); }
};

class ComputeDomainClique : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.nvidia.com/v1beta1";
  static constexpr char kKind[] = "ComputeDomainClique";
  static const ResourceRef& Resource() { return resources::kComputeDomainCliques; }
  static std::vector<ShapeRule> ShapeRules();
  // Named "<cdUID>.<cliqueID>" by the driver.
  static ComputeDomainClique New(std::string_view ns, std::string_view name) {
    return ComputeDomainClique(NewJson(kApiVersion, kKind, name, ns));
  }
  using Object::Object;

  std::vector<CliqueDaemon> daemons() const { return GetList<CliqueDaemon>({"daemons"}); }
  void set_daemons(const std::vector<CliqueDaemon>& value) { SetList({"daemons"}, value); }
};

}  // namespace nvdra::k8s
