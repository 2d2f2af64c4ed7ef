#pragma once

// Typed views of the built-in kinds the driver reads and writes besides DRA:
// Node, Pod, DaemonSet (apps/v1), Lease (coordination.k8s.io/v1) and Event
// (events.k8s.io/v1), with their list elements (Taint, NodeAddress,
// PodResourceClaim, PodResourceClaimStatus). See object.h for the pattern.
// Ownership: values. Thread-safety: thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client.h"
#include "k8s/objects/object.h"

namespace nvdra::k8s {

class Taint : public JsonView {
 public:
  using JsonView::JsonView;
  std::string key() const { return GetString({"key"}); }
  std::string value() const { return GetString({"value"}); }
  std::string effect() const { return GetString({"effect"}); }  // NoSchedule, PreferNoSchedule, NoExecute
};

class NodeAddress : public JsonView {
 public:
  using JsonView::JsonView;
  std::string type() const { return GetString({"type"}); }  // InternalIP, Hostname, ...
  std::string address() const { return GetString({"address"}); }
};

class Node : public Object {
 public:
  static constexpr char kApiVersion[] = "v1";
  static constexpr char kKind[] = "Node";
  static const ResourceRef& Resource() { return resources::kNodes; }
  static std::vector<ShapeRule> ShapeRules();
  static Node New(std::string_view name) { return Node(NewJson(kApiVersion, kKind, name)); }
  using Object::Object;

  std::vector<Taint> taints() const { return GetList<Taint>({"spec", "taints"}); }
  void set_taints(const std::vector<Taint>& value) { SetList({"spec", "taints"}, value); }
  bool unschedulable() const { return GetBool({"spec", "unschedulable"}); }
  std::vector<NodeAddress> addresses() const { return GetList<NodeAddress>({"status", "addresses"}); }
  // The first address of `type`, "" when none.
  std::string Address(std::string_view type) const;
};

// spec.resourceClaims[i]: a claim the pod uses, by name or from a template.
class PodResourceClaim : public JsonView {
 public:
  using JsonView::JsonView;
  std::string name() const { return GetString({"name"}); }
  std::string resource_claim_name() const { return GetString({"resourceClaimName"}); }
  std::string resource_claim_template_name() const { return GetString({"resourceClaimTemplateName"}); }
};

// status.resourceClaimStatuses[i]: the claim generated for a template.
class PodResourceClaimStatus : public JsonView {
 public:
  using JsonView::JsonView;
  std::string name() const { return GetString({"name"}); }
  std::string resource_claim_name() const { return GetString({"resourceClaimName"}); }
};

class Pod : public Object {
 public:
  static constexpr char kApiVersion[] = "v1";
  static constexpr char kKind[] = "Pod";
  static const ResourceRef& Resource() { return resources::kPods; }
  static std::vector<ShapeRule> ShapeRules();
  static Pod New(std::string_view ns, std::string_view name) { return Pod(NewJson(kApiVersion, kKind, name, ns)); }
  using Object::Object;

  std::string node_name() const { return GetString({"spec", "nodeName"}); }
  void set_node_name(std::string_view value) { Set({"spec", "nodeName"}, value); }
  std::vector<PodResourceClaim> resource_claims() const { return GetList<PodResourceClaim>({"spec", "resourceClaims"}); }
  std::vector<PodResourceClaimStatus> resource_claim_statuses() const {
    return GetList<PodResourceClaimStatus>({"status", "resourceClaimStatuses"});
  }
  std::string phase() const { return GetString({"status", "phase"}); }
  std::string pod_ip() const { return GetString({"status", "podIP"}); }
};

class DaemonSet : public Object {
 public:
  static constexpr char kApiVersion[] = "apps/v1";
  static constexpr char kKind[] = "DaemonSet";
  static const ResourceRef& Resource() { return resources::kDaemonSets; }
  static std::vector<ShapeRule> ShapeRules();
  static DaemonSet New(std::string_view ns, std::string_view name) {
    return DaemonSet(NewJson(kApiVersion, kKind, name, ns));
  }
  using Object::Object;

  std::map<std::string, std::string> selector_match_labels() const {
    return GetStringMap({"spec", "selector", "matchLabels"});
  }
  // The pod template (spec.template), an empty object when absent.
  nlohmann::json pod_template() const { return GetObject({"spec", "template"}); }
  void set_pod_template(nlohmann::json value) { Set({"spec", "template"}, std::move(value)); }
  std::int64_t desired_number_scheduled() const { return GetInt({"status", "desiredNumberScheduled"}); }
  std::int64_t number_ready() const { return GetInt({"status", "numberReady"}); }
  std::int64_t observed_generation() const { return GetInt({"status", "observedGeneration"}); }
};

class Lease : public Object {
 public:
  static constexpr char kApiVersion[] = "coordination.k8s.io/v1";
  static constexpr char kKind[] = "Lease";
  static const ResourceRef& Resource() { return resources::kLeases; }
  static std::vector<ShapeRule> ShapeRules();
  static Lease New(std::string_view ns, std::string_view name) { return Lease(NewJson(kApiVersion, kKind, name, ns)); }
  using Object::Object;

  std::string holder_identity() const { return GetString({"spec", "holderIdentity"}); }
  void set_holder_identity(std::string_view value) { Set({"spec", "holderIdentity"}, value); }
  std::int64_t lease_duration_seconds() const { return GetInt({"spec", "leaseDurationSeconds"}); }
  void set_lease_duration_seconds(std::int64_t value) { Set({"spec", "leaseDurationSeconds"}, value); }
  // RFC 3339 with microseconds (MicroTime), "" when absent.
  std::string acquire_time() const { return GetString({"spec", "acquireTime"}); }
  void set_acquire_time(std::string_view value) { Set({"spec", "acquireTime"}, value); }
  std::string renew_time() const { return GetString({"spec", "renewTime"}); }
  void set_renew_time(std::string_view value) { Set({"spec", "renewTime"}, value); }
  std::int64_t lease_transitions() const { return GetInt({"spec", "leaseTransitions"}); }
  void set_lease_transitions(std::int64_t value) { Set({"spec", "leaseTransitions"}, value); }
};

// events.k8s.io/v1 Event.
class Event : public Object {
 public:
  static constexpr char kApiVersion[] = "events.k8s.io/v1";
  static constexpr char kKind[] = "Event";
  static const ResourceRef& Resource() { return resources::kEvents; }
  static std::vector<ShapeRule> ShapeRules();
  static Event New(std::string_view ns, std::string_view name) { return Event(NewJson(kApiVersion, kKind, name, ns)); }
  using Object::Object;

  // The object the event is about (an ObjectReference), empty when absent.
  nlohmann::json regarding() const { return GetObject({"regarding"}); }
  void set_regarding(nlohmann::json value) { Set({"regarding"}, std::move(value)); }
  std::string type() const { return GetString({"type"}); }  // Normal, Warning
  void set_type(std::string_view value) { Set({"type"}, value); }
  std::string reason() const { return GetString({"reason"}); }
  void set_reason(std::string_view value) { Set({"reason"}, value); }
  std::string action() const { return GetString({"action"}); }
  void set_action(std::string_view value) { Set({"action"}, value); }
  std::string note() const { return GetString({"note"}); }
  void set_note(std::string_view value) { Set({"note"}, value); }
  std::string event_time() const { return GetString({"eventTime"}); }
  void set_event_time(std::string_view value) { Set({"eventTime"}, value); }
  std::string reporting_controller() const { return GetString({"reportingController"}); }
  void set_reporting_controller(std::string_view value) { Set({"reportingController"}, value); }
  std::string reporting_instance() const { return GetString({"reportingInstance"}); }
  void set_reporting_instance(std::string_view value) { Set({"reportingInstance"}, value); }
  // series.count; 0 for an event seen once.
  std::int64_t series_count() const { return GetInt({"series", "count"}); }
  void set_series(std::int64_t count, std::string_view last_observed_time);
};

}  // namespace nvdra::k8s
