#include "webhook/admission.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace nvdra::webhook {
namespace {

using nlohmann::json;
using api::ValidateDeviceConfigs;

// The default gates: every sharing strategy off.
common::FeatureGates Gates() { return common::FeatureGates::Defaults(); }

json Params(const std::string& kind, json extra = json::object()) {
  json config = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", kind}};
  config.update(extra);
  return config;
}

json Opaque(const std::string& driver, json parameters, json requests = nullptr) {
  json entry = {{"opaque", {{"driver", driver}, {"parameters", std::move(parameters)}}}};
  if (!requests.is_null()) entry["requests"] = std::move(requests);
  return entry;
}

// A claim spec of the given resource.k8s.io version: v1beta1 names the class
// on the request itself, v1 and v1beta2 under `exactly`.
json ClaimSpec(const std::string& version, json configs) {
  json request = version == "v1beta1"
                     ? json{{"name", "gpu"}, {"deviceClassName", "gpu.nvidia.com"}}
                     : json{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}};
  return {{"devices", {{"requests", json::array({request})}, {"config", std::move(configs)}}}};
}

json Object(const std::string& version, bool is_template, json configs) {
  json object = {{"apiVersion", "resource.k8s.io/" + version},
                 {"kind", is_template ? "ResourceClaimTemplate" : "ResourceClaim"},
                 {"metadata", {{"name", "x"}, {"namespace", "ns"}}}};
  if (is_template) {
    object["spec"] = {{"spec", ClaimSpec(version, std::move(configs))}};
  } else {
    object["spec"] = ClaimSpec(version, std::move(configs));
  }
  return object;
}

json Review(const std::string& version, bool is_template, json object, const std::string& operation = "CREATE",
            json old_object = nullptr) {
  const std::string plural = is_template ? "resourceclaimtemplates" : "resourceclaims";
  json request = {{"uid", "0d9d3a1c-uid"},
                  {"kind", {{"group", "resource.k8s.io"}, {"version", version},
                            {"kind", is_template ? "ResourceClaimTemplate" : "ResourceClaim"}}},
                  {"resource", {{"group", "resource.k8s.io"}, {"version", version}, {"resource", plural}}},
                  {"operation", operation},
                  {"namespace", "ns"},
                  {"object", std::move(object)}};
  if (!old_object.is_null()) request["oldObject"] = std::move(old_object);
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
}

struct Answer {
  AdmissionReply reply;
  json response;
};

Answer Send(const json& review, const std::string& content_type = "application/json") {
  Answer answer{ReviewAdmission(content_type, review.dump(), Gates()), nullptr};
  if (answer.reply.http_status == 200) {
    json body = json::parse(answer.reply.body);
    EXPECT_EQ(body["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(body["kind"], "AdmissionReview");
    answer.response = body["response"];
    EXPECT_EQ(answer.response["uid"], "0d9d3a1c-uid");
  }
  return answer;
}

// Every resource and version the webhook serves.
class EveryResource : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  std::string version() const { return std::get<0>(GetParam()); }
  bool is_template() const { return std::get<1>(GetParam()); }
  std::string prefix() const { return is_template() ? "spec.spec.devices" : "spec.devices"; }
  Answer Create(json configs) {
    return Send(Review(version(), is_template(), Object(version(), is_template(), std::move(configs))));
  }
};

TEST_P(EveryResource, AdmitsValidConfigsOfBothDrivers) {
  Answer answer = Create(json::array(
      {Opaque("gpu.nvidia.com", Params("GpuConfig"), json::array({"gpu"})),
       Opaque("gpu.nvidia.com", Params("MigDeviceConfig", {{"sharing", nullptr}})),
       Opaque("compute-domain.nvidia.com",
              Params("ComputeDomainChannelConfig", {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}, {"allocationMode", "All"}})),
       Opaque("compute-domain.nvidia.com", Params("ComputeDomainDaemonConfig", {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}}))}));
  EXPECT_EQ(answer.reply.outcome, AdmissionOutcome::kAllowed) << answer.reply.body;
  EXPECT_EQ(answer.response["allowed"], true);
  EXPECT_FALSE(answer.response.contains("status"));
  EXPECT_EQ(answer.reply.resource, is_template() ? "resourceclaimtemplates" : "resourceclaims");
}

TEST_P(EveryResource, DeniesAnInvalidConfigNamingItsField) {
  Answer answer = Create(json::array({Opaque("other.example.com", json{{"anything", 1}}),
                                      Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy",
                                                                                                 "Sometimes"}}}}))}));
  EXPECT_EQ(answer.reply.outcome, AdmissionOutcome::kDenied);
  EXPECT_EQ(answer.response["allowed"], false);
  EXPECT_EQ(answer.response["status"]["code"], 422);
  EXPECT_EQ(answer.response["status"]["reason"], "Invalid");
  const std::string message = answer.response["status"]["message"];
  EXPECT_EQ(message.rfind("1 configs failed to validate: " + prefix() +
                              ".config[1].opaque.parameters.sharing.strategy: unknown strategy \"Sometimes\"; use "
                              "TimeSlicing or MPS",
                          0),
            0u)
      << message;
}

INSTANTIATE_TEST_SUITE_P(Webhook, EveryResource,
                         ::testing::Combine(::testing::Values("v1", "v1beta2", "v1beta1"), ::testing::Bool()),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + (std::get<1>(param_info.param) ? "Template" : "Claim");
                         });

// One invalid config per case, and the text its message must contain.
struct InvalidCase {
  std::string name;
  json entry;
  std::string expected;
};

class EveryInvalidConfig : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(EveryInvalidConfig, IsDeniedWithTheFieldAndTheFix) {
  const InvalidCase& c = GetParam();
  Answer answer = Send(Review("v1", false, Object("v1", false, json::array({c.entry}))));
  ASSERT_EQ(answer.reply.outcome, AdmissionOutcome::kDenied) << answer.reply.body;
  const std::string message = answer.response["status"]["message"];
  EXPECT_NE(message.find("spec.devices.config[0].opaque.parameters" + c.expected), std::string::npos) << message;
}

const InvalidCase kInvalidCases[] = {
    {"UnknownField", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy", "MPS"},
                                                                                   {"mpsConfig", {{"multiuser",
                                                                                                   true}}}}}})),
     ".sharing.mpsConfig.multiuser: unknown field (known fields here: defaultActiveThreadPercentage, "
     "defaultPerDevicePinnedMemoryLimit, defaultPinnedDeviceMemoryLimit, multiUser)"},
    {"UnknownTopLevelField", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharng", json::object()}})),
     ".sharng: unknown field"},
    {"WrongType", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy", 7}}}})),
     ".sharing.strategy: must be a string, not number"},
    {"WrongApiVersion",
     Opaque("gpu.nvidia.com", json{{"apiVersion", "resource.nvidia.com/v1"}, {"kind", "GpuConfig"}}),
     ".apiVersion: \"resource.nvidia.com/v1\" is not supported; use \"resource.nvidia.com/v1beta1\""},
    {"UnknownKind", Opaque("gpu.nvidia.com", Params("TpuConfig")), ".kind: unknown kind \"TpuConfig\""},
    {"NotAnObject", Opaque("gpu.nvidia.com", json::array({1})), ": must be an object with apiVersion and kind"},
    {"UnknownStrategy", Opaque("gpu.nvidia.com", Params("MigDeviceConfig", {{"sharing", {{"strategy", "X"}}}})),
     ".sharing.strategy: unknown strategy \"X\""},
    {"TimeSlicingNeedsItsGate", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy",
                                                                                              "TimeSlicing"}}}})),
     ".sharing.strategy: TimeSlicing needs the feature gate TimeSlicingSettings: enable it on the driver (chart "
     "value featureGates.TimeSlicingSettings=true)"},
    {"MigHasNoTimeSlicingConfig",
     Opaque("gpu.nvidia.com", Params("MigDeviceConfig", {{"sharing", {{"timeSlicingConfig", json::object()}}}})),
     ".sharing.timeSlicingConfig: unknown field"},
    {"PassthroughNeedsItsGate", Opaque("gpu.nvidia.com", Params("VfioDeviceConfig")),
     ": VfioDeviceConfig needs the feature gate PassthroughSupport: enable it on the driver (chart value "
     "featureGates.PassthroughSupport=true)"},
    {"ChannelWithoutDomain", Opaque("compute-domain.nvidia.com", Params("ComputeDomainChannelConfig")),
     ".domainID: must be set to the ComputeDomain's UID"},
    {"ChannelBadAllocationMode",
     Opaque("compute-domain.nvidia.com",
            Params("ComputeDomainChannelConfig", {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}, {"allocationMode", "Many"}})),
     ".allocationMode: \"Many\" is not one of Single, All"},
    {"DaemonWithoutDomain", Opaque("compute-domain.nvidia.com", Params("ComputeDomainDaemonConfig")),
     ".domainID: must be set to the ComputeDomain's UID"},
    {"GpuKindForComputeDomainDriver", Opaque("compute-domain.nvidia.com", Params("GpuConfig")),
     ".kind: GpuConfig is not a configuration of driver compute-domain.nvidia.com (its kinds: "
     "ComputeDomainChannelConfig, ComputeDomainDaemonConfig); set opaque.driver to gpu.nvidia.com"},
    {"DomainIdNotAUid", Opaque("compute-domain.nvidia.com", Params("ComputeDomainChannelConfig", {{"domainID", "../../etc"}})),
     ".domainID: \"../../etc\" is not a UID; set it to the ComputeDomain's metadata.uid"},
    {"ChannelKindForGpuDriver", Opaque("gpu.nvidia.com", Params("ComputeDomainChannelConfig", {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}})),
     ".kind: ComputeDomainChannelConfig is not a configuration of driver gpu.nvidia.com"},
    {"MissingParameters", json{{"opaque", {{"driver", "gpu.nvidia.com"}}}},
     ": must be an object with apiVersion and kind, not null"},
};

INSTANTIATE_TEST_SUITE_P(Webhook, EveryInvalidConfig, ::testing::ValuesIn(kInvalidCases),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(ReviewAdmission, CountsAndJoinsEveryInvalidConfig) {
  Answer answer = Send(Review(
      "v1", true,
      Object("v1", true,
             json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"bogus", 1}})),
                          Opaque("gpu.nvidia.com", Params("GpuConfig")),
                          Opaque("compute-domain.nvidia.com", Params("ComputeDomainDaemonConfig"))}))));
  ASSERT_EQ(answer.reply.outcome, AdmissionOutcome::kDenied);
  EXPECT_EQ(answer.response["status"]["message"],
            "2 configs failed to validate: spec.spec.devices.config[0].opaque.parameters.bogus: unknown field "
            "(known fields here: apiVersion, fabricPartitionID, fabricTopologyConfig, kind, sharing); spec.spec.devices.config[2].opaque.parameters.domainID: "
            "must be set to the ComputeDomain's UID");
}

TEST(ReviewAdmission, LeavesOtherDriversAndClaimsWithoutConfigAlone) {
  EXPECT_EQ(Send(Review("v1", false,
                        Object("v1", false, json::array({Opaque("gpu.example.com", json{{"kind", "GpuConfig"}}),
                                                         Opaque("nvidia.com", json("not even an object"))}))))
                .reply.outcome,
            AdmissionOutcome::kAllowed);
  json bare = Object("v1", false, json::array());
  bare["spec"]["devices"].erase("config");
  EXPECT_EQ(Send(Review("v1", false, bare)).reply.outcome, AdmissionOutcome::kAllowed);
  json no_devices = {{"spec", json::object()}};
  EXPECT_EQ(Send(Review("v1", false, no_devices)).reply.outcome, AdmissionOutcome::kAllowed);
}

TEST(ReviewAdmission, UpdateThatKeepsTheConfigsIsAllowedEvenIfTheyAreInvalid) {
  // An object created before the webhook existed must stay deletable: its
  // finalizers and labels change through UPDATE.
  const json bad = json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"bogus", 1}}))});
  json old_object = Object("v1", false, bad);
  json new_object = old_object;
  new_object["metadata"]["finalizers"] = json::array();
  EXPECT_EQ(Send(Review("v1", false, new_object, "UPDATE", old_object)).reply.outcome, AdmissionOutcome::kAllowed);
  // Changing the configs to something invalid is judged.
  json changed = Object("v1", false, json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"other", 1}}))}));
  EXPECT_EQ(Send(Review("v1", false, changed, "UPDATE", old_object)).reply.outcome, AdmissionOutcome::kDenied);
  // An UPDATE without oldObject is judged like a CREATE.
  EXPECT_EQ(Send(Review("v1", false, new_object, "UPDATE")).reply.outcome, AdmissionOutcome::kDenied);
}

TEST(ReviewAdmission, DeleteAndStatusUpdatesAreAllowed) {
  json review = Review("v1", false, nullptr, "DELETE");
  EXPECT_EQ(Send(review).reply.outcome, AdmissionOutcome::kAllowed);
  json status = Review("v1", false,
                       Object("v1", false, json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"x", 1}}))})),
                       "UPDATE");
  status["request"]["subResource"] = "status";
  EXPECT_EQ(Send(status).reply.outcome, AdmissionOutcome::kAllowed);
}

TEST(ReviewAdmission, ObjectsItCannotReadAreBadRequests) {
  json other = Review("v1", false, Object("v1", false, json::array()));
  other["request"]["resource"] = {{"group", ""}, {"version", "v1"}, {"resource", "pods"}};
  Answer answer = Send(other);
  EXPECT_EQ(answer.reply.outcome, AdmissionOutcome::kBadObject);
  EXPECT_EQ(answer.response["allowed"], false);
  EXPECT_EQ(answer.response["status"]["code"], 400);
  EXPECT_EQ(answer.response["status"]["reason"], "BadRequest");
  EXPECT_NE(answer.response["status"]["message"].get<std::string>().find("got /v1, Resource=pods"),
            std::string::npos);

  json alpha = Review("v1alpha3", false, Object("v1alpha3", false, json::array()));
  EXPECT_EQ(Send(alpha).reply.outcome, AdmissionOutcome::kBadObject);

  json no_object = Review("v1", false, nullptr);
  EXPECT_EQ(Send(no_object).reply.outcome, AdmissionOutcome::kBadObject);

  json config_not_list = Object("v1", false, json::array());
  config_not_list["spec"]["devices"]["config"] = "x";
  answer = Send(Review("v1", false, config_not_list));
  EXPECT_EQ(answer.reply.outcome, AdmissionOutcome::kBadObject);
  EXPECT_NE(answer.response["status"]["message"].get<std::string>().find("spec.devices.config: must be a list"),
            std::string::npos);
}

TEST(ReviewAdmission, MalformedReviewsAreHttpErrors) {
  const json good = Review("v1", false, Object("v1", false, json::array()));
  AdmissionReply reply = ReviewAdmission("text/plain", good.dump(), Gates());
  EXPECT_EQ(reply.http_status, 415);
  EXPECT_EQ(reply.outcome, AdmissionOutcome::kBadRequest);
  EXPECT_NE(reply.body.find("contentType=text/plain, expected application/json"), std::string::npos);
  EXPECT_EQ(ReviewAdmission("application/json; charset=utf-8", good.dump(), Gates()).http_status, 200);

  reply = ReviewAdmission("application/json", "{not json", Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("not valid JSON (parse error at line 1, column 3"), std::string::npos) << reply.body;

  // A number beyond a 64-bit float is named as such, not as broken JSON, and
  // a huge one is not echoed whole.
  json huge = good;
  std::string text = huge.dump();
  text.insert(text.size() - 1, ",\"x\":1e400");
  reply = ReviewAdmission("application/json", text, Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("number overflow parsing '1e400'"), std::string::npos) << reply.body;
  EXPECT_NE(reply.body.find("numbers must fit a 64-bit float"), std::string::npos) << reply.body;
  text = huge.dump();
  text.insert(text.size() - 1, ",\"x\":1" + std::string(100000, '0') + "e400");
  reply = ReviewAdmission("application/json", text, Gates());
  EXPECT_LT(reply.body.size(), 600u) << reply.body.substr(0, 600);

  json v1beta1 = good;
  v1beta1["apiVersion"] = "admission.k8s.io/v1beta1";
  reply = ReviewAdmission("application/json", v1beta1.dump(), Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("admissionReviewVersions: [\"v1\"]"), std::string::npos) << reply.body;

  json no_request = good;
  no_request.erase("request");
  EXPECT_EQ(ReviewAdmission("application/json", no_request.dump(), Gates()).http_status, 400);

  json no_uid = good;
  no_uid["request"].erase("uid");
  reply = ReviewAdmission("application/json", no_uid.dump(), Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("request.uid is missing"), std::string::npos);
}

TEST(ValidateDeviceConfigs, UsesTheGivenPath) {
  const json devices = {{"config", json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"x", 1}}))})}};
  common::Status status = ValidateDeviceConfigs(devices, "here", Gates());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("here.config[0].opaque.parameters.x: unknown field"), std::string::npos);
  EXPECT_TRUE(ValidateDeviceConfigs(json(), "here", Gates()).ok());
}

}  // namespace
}  // namespace nvdra::webhook

namespace nvdra::webhook {
namespace {

// With the driver's gate on, a time-sliced GPU is admitted; the webhook judges
// with the gates the chart gives the plugins too.
TEST(ValidateDeviceConfigs, FollowsTheDriversFeatureGates) {
  const json time_sliced = {
      {"config", json::array({{{"opaque",
                                {{"driver", "gpu.nvidia.com"},
                                 {"parameters", Params("GpuConfig", {{"sharing",
                                                                      {{"strategy", "TimeSlicing"},
                                                                       {"timeSlicingConfig", {{"interval", "Long"}}}}}})}}}}})}};
  auto on = common::FeatureGates::Parse("TimeSlicingSettings=true");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(ValidateDeviceConfigs(time_sliced, "spec.devices", *on).ok());
  common::Status off = ValidateDeviceConfigs(time_sliced, "spec.devices", Gates());
  EXPECT_EQ(off.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(off.message().find("needs the feature gate TimeSlicingSettings"), std::string::npos) << off.message();
}

// Seed 002's example is admitted with the gate on, and the answer warns that
// its partitionIDs do nothing under Auto; with the gate off it is denied
// naming the gate.
TEST(ReviewAdmission, FabricTopologyConfigIsGatedAndIgnoredFieldsComeBackAsWarnings) {
  const json example = Params("GpuConfig", json::parse(R"({"fabricTopologyConfig": {"strategy": "Auto",
      "partitionSize": 4, "virtualizationModel": "BareMetal", "minBandwidth": 600.0, "maxLatency": 0.1,
      "partitionIDs": ["partition-1"]}})"));
  const std::string body = Review("v1", false, Object("v1", false, json::array({Opaque("gpu.nvidia.com", example)}))).dump();
  auto on = common::FeatureGates::Parse("FabricTopologySupport=true");
  ASSERT_TRUE(on.ok());
  AdmissionReply allowed = ReviewAdmission("application/json", body, *on);
  ASSERT_EQ(allowed.outcome, AdmissionOutcome::kAllowed) << allowed.body;
  const json response = json::parse(allowed.body)["response"];
  ASSERT_EQ(response["warnings"].size(), 1U) << response.dump();
  EXPECT_NE(response["warnings"][0].get<std::string>().find(
                "spec.devices.config[0].opaque.parameters.fabricTopologyConfig.partitionIDs: ignored with strategy Auto"),
            std::string::npos);

  AdmissionReply denied = ReviewAdmission("application/json", body, Gates());
  EXPECT_EQ(denied.outcome, AdmissionOutcome::kDenied);
  EXPECT_NE(denied.message.find("requires the FabricTopologySupport feature gate: set FABRIC_TOPOLOGY_SUPPORT=true"),
            std::string::npos)
      << denied.message;
  EXPECT_FALSE(Send(Review("v1", false, Object("v1", false, json::array({Opaque("gpu.nvidia.com", Params("GpuConfig"))}))))
                   .response.contains("warnings"))
      << "no warnings key when there is nothing to say";
}

// VFIO rules a claim spec shows before any device is allocated: the config
// kind must fit the class of each request it names, a claim has at most one
// VfioDeviceConfig, and backendPolicy is one of upstream's two.
TEST(ValidateDeviceConfigs, VfioConfigsFitTheirRequestsAndComeOnePerClaim) {
  auto gates = common::FeatureGates::Parse("PassthroughSupport=true");
  ASSERT_TRUE(gates.ok());
  auto request = [](const std::string& name, const std::string& device_class) {
    return json{{"name", name}, {"exactly", {{"deviceClassName", device_class}}}};
  };
  auto config = [](const std::string& kind, json requests, json extra = json::object()) {
    json parameters = Params(kind, std::move(extra));
    return json{{"requests", std::move(requests)}, {"opaque", {{"driver", "gpu.nvidia.com"}, {"parameters", parameters}}}};
  };
  const json requests = json::array({request("vm", "vfio.gpu.nvidia.com"), request("slice", "mig.nvidia.com"),
                                     request("gpu", "gpu.nvidia.com")});
  json good = {{"requests", requests},
               {"config", json::array({config("VfioDeviceConfig", json::array({"vm"}),
                                              {{"iommu", {{"backendPolicy", "PreferIommuFD"}, {"enableAPIDevice", true}}}}),
                                       config("MigDeviceConfig", json::array({"slice"}))})}};
  EXPECT_TRUE(ValidateDeviceConfigs(good, "spec.devices", *gates).ok());

  json on_mig = {{"requests", requests}, {"config", json::array({config("VfioDeviceConfig", json::array({"slice"}))})}};
  common::Status status = ValidateDeviceConfigs(on_mig, "spec.devices", *gates);
  EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("spec.devices.config[0].opaque.parameters.kind: a VfioDeviceConfig cannot apply to "
                                  "request slice, whose class mig.nvidia.com gives devices that take a MigDeviceConfig; "
                                  "VFIO passes whole GPUs through: request DeviceClass vfio.gpu.nvidia.com"),
            std::string::npos)
      << status.message();

  json gpu_config_on_vfio = {{"requests", requests}, {"config", json::array({config("GpuConfig", json::array({"vm"}))})}};
  status = ValidateDeviceConfigs(gpu_config_on_vfio, "spec.devices", *gates);
  EXPECT_NE(status.message().find("a GpuConfig cannot apply to request vm, whose class vfio.gpu.nvidia.com gives devices "
                                  "that take a VfioDeviceConfig"),
            std::string::npos)
      << status.message();

  json two = {{"requests", requests},
              {"config", json::array({config("VfioDeviceConfig", json::array({"vm"})),
                                      config("VfioDeviceConfig", json::array())})}};
  status = ValidateDeviceConfigs(two, "spec.devices", *gates);
  EXPECT_NE(status.message().find("spec.devices: 2 VfioDeviceConfigs (spec.devices.config[0], spec.devices.config[1]); "
                                  "a claim takes at most one VFIO device group"),
            std::string::npos)
      << status.message();

  json bad_policy = {{"config", json::array({config("VfioDeviceConfig", json::array(),
                                                    {{"iommu", {{"backendPolicy", "Fast"}}}})})}};
  status = ValidateDeviceConfigs(bad_policy, "spec.devices", *gates);
  EXPECT_NE(status.message().find("spec.devices.config[0].opaque.parameters.iommu.backendPolicy: \"Fast\" is not one of "
                                  "LegacyOnly, PreferIommuFD"),
            std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace nvdra::webhook

namespace nvdra::webhook {
namespace {

// An AdmissionReview for a claim whose only config has `parameters`.
std::string ReviewWithParameters(const std::string& parameters_text) {
  json config = {{"opaque", {{"driver", "gpu.nvidia.com"}, {"parameters", "@"}}}};
  json object;
  object["spec"]["devices"]["config"] = json::array({config});
  json request = {{"uid", "u"}, {"operation", "CREATE"}, {"object", object}};
  request["resource"] = {{"group", "resource.k8s.io"}, {"version", "v1"}, {"resource", "resourceclaims"}};
  json review = {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}};
  std::string text = review.dump();
  text.replace(text.find("\"@\""), 3, parameters_text);
  return text;
}

// ~100,000 nested arrays used to overflow the worker's stack (the object is
// copied and compared recursively after parsing); now the body is refused
// before it is parsed, and a depth any config could have is judged as usual.
TEST(ReviewAdmission, RefusesJsonNestedDeeperThanAnyClaimBeforeParsingIt) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  AdmissionReply reply = ReviewAdmission("application/json", ReviewWithParameters(deep), Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.message.find("JSON nested deeper than 512 levels"), std::string::npos) << reply.message;

  const std::string fine = std::string(400, '[') + std::string(400, ']');
  reply = ReviewAdmission("application/json", ReviewWithParameters(fine), Gates());
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.outcome, AdmissionOutcome::kDenied);
  EXPECT_NE(reply.message.find("must be an object with apiVersion and kind"), std::string::npos) << reply.message;
}

// A body of tiny values parses into a tree ~50 times its size: one with more
// values than any claim the API server accepts is refused before parsing.
TEST(ReviewAdmission, RefusesMoreJsonValuesThanAnyClaimBeforeParsingIt) {
  std::string many = "[0";
  for (std::size_t i = 1; i < kMaxAdmissionValues; ++i) many += ",0";
  many += "]";
  AdmissionReply reply = ReviewAdmission("application/json", ReviewWithParameters(many), Gates());
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.message.find("more than 100000 JSON values"), std::string::npos) << reply.message;

  reply = ReviewAdmission("application/json", ReviewWithParameters("[0,0,0]"), Gates());
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.outcome, AdmissionOutcome::kDenied);
}

// A denial does not echo a huge input back: long keys are cut, and only the
// first ten problems are listed.
TEST(ValidateDeviceConfigs, DenialsStaySmallWhateverTheInput) {
  json configs = json::array();
  // One 1 MiB unknown key, then 9,999 small bad configs.
  configs.push_back(
      {{"opaque", {{"driver", "gpu.nvidia.com"}, {"parameters", Params("GpuConfig", {{std::string(1 << 20, 'k'), 1}})}}}});
  for (int i = 1; i < 10000; ++i) {
    configs.push_back({{"opaque", {{"driver", "gpu.nvidia.com"}, {"parameters", Params("GpuConfig", {{"bogus", 1}})}}}});
  }
  common::Status status = ValidateDeviceConfigs(json{{"config", std::move(configs)}}, "spec.devices", Gates());
  ASSERT_FALSE(status.ok());
  EXPECT_LT(status.message().size(), 16u * 1024) << status.message().substr(0, 300);
  EXPECT_NE(status.message().find("10000 configs failed to validate"), std::string::npos);
  EXPECT_NE(status.message().find("and 9990 more"), std::string::npos);
  EXPECT_NE(status.message().find("kkk...: unknown field"), std::string::npos);
}

}  // namespace
}  // namespace nvdra::webhook
