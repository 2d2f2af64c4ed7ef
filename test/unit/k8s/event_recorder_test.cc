// The pure parts of the event recorder: note truncation on UTF-8 boundaries,
// the aggregation key (which fields make two events "the same"), the object
// reference, and option validation. Aggregation against a real API server is
// in test/cluster/event_recorder_test.cc.

#include "k8s/event_recorder.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

namespace nvdra::k8s {
namespace {

using nlohmann::json;

ObjectReference Cm(const std::string& name, const std::string& uid = "u1") {
  return ObjectReference{"v1", "ConfigMap", "ns", name, uid, "5"};
}

TEST(TruncateNoteTest, ShortNotesAreKept) {
  EXPECT_EQ(TruncateNote(""), "");
  EXPECT_EQ(TruncateNote(std::string(1024, 'x')), std::string(1024, 'x'));
}

TEST(TruncateNoteTest, LongNotesAreCutTo1KiBWithEllipsis) {
  const std::string cut = TruncateNote(std::string(5000, 'x'));
  EXPECT_EQ(cut.size(), 1024u);
  EXPECT_EQ(cut.substr(1021), "...");
}

TEST(TruncateNoteTest, NeverSplitsAUtf8Character) {
  // 1020 ASCII bytes, then 3-byte characters: byte 1021 is inside one.
  std::string note(1020, 'a');
  for (int i = 0; i < 10; ++i) note += "\xE2\x82\xAC";  // U+20AC
  const std::string cut = TruncateNote(note);
  EXPECT_LE(cut.size(), 1024u);
  EXPECT_EQ(cut, std::string(1020, 'a') + "...");
  EXPECT_NO_THROW(json(cut).dump());  // still valid UTF-8
}

TEST(EventNameTest, KeepsShortNamesAndCutsLongOnesToAValidName) {
  EXPECT_EQ(EventName("my-domain", ".18a2b"), "my-domain.18a2b");
  EXPECT_EQ(EventName("", ".18a2b"), "event.18a2b");
  const std::string suffix = ".187f3a9c2b1d4e50";
  const std::string longest(253, 'a');
  const std::string name = EventName(longest, suffix);
  EXPECT_EQ(name.size(), 253u);
  EXPECT_TRUE(name.ends_with(suffix));
  // A cut that would end in '-' or '.' drops them.
  std::string dashes(230, 'a');
  dashes += std::string(23, '-');
  const std::string cut = EventName(dashes, suffix);
  EXPECT_LE(cut.size(), 253u);
  EXPECT_EQ(cut, std::string(230, 'a') + suffix);
}

TEST(AggregationKeyTest, SameFieldsSameKey) {
  EXPECT_EQ(AggregationKey(Cm("a"), EventType::kNormal, "R", "A", "n"),
            AggregationKey(Cm("a"), EventType::kNormal, "R", "A", "n"));
  // The resourceVersion changes as the object does; the event is the same.
  ObjectReference newer = Cm("a");
  newer.resource_version = "99";
  EXPECT_EQ(AggregationKey(Cm("a"), EventType::kNormal, "R", "A", "n"),
            AggregationKey(newer, EventType::kNormal, "R", "A", "n"));
}

TEST(AggregationKeyTest, EachFieldMatters) {
  const std::string base = AggregationKey(Cm("a"), EventType::kNormal, "R", "A", "n");
  EXPECT_NE(base, AggregationKey(Cm("b"), EventType::kNormal, "R", "A", "n"));
  EXPECT_NE(base, AggregationKey(Cm("a", "u2"), EventType::kNormal, "R", "A", "n"));
  EXPECT_NE(base, AggregationKey(Cm("a"), EventType::kWarning, "R", "A", "n"));
  EXPECT_NE(base, AggregationKey(Cm("a"), EventType::kNormal, "R2", "A", "n"));
  EXPECT_NE(base, AggregationKey(Cm("a"), EventType::kNormal, "R", "A2", "n"));
  EXPECT_NE(base, AggregationKey(Cm("a"), EventType::kNormal, "R", "A", "n2"));
}

TEST(AggregationKeyTest, NoAmbiguousJoins) {
  EXPECT_NE(AggregationKey(Cm("a"), EventType::kNormal, "R|A", "", "n"),
            AggregationKey(Cm("a"), EventType::kNormal, "R", "|A", "n"));
}

TEST(ObjectReferenceTest, FromObjectAndBack) {
  const json cm = {{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata", {{"name", "c"}, {"namespace", "ns"}, {"uid", "u"}, {"resourceVersion", "7"}}}};
  const ObjectReference ref = ObjectReference::FromObject(cm);
  EXPECT_EQ(ref.ToJson(), (json{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"namespace", "ns"}, {"name", "c"},
                                {"uid", "u"}, {"resourceVersion", "7"}}));
  // Cluster-scoped: no namespace field at all.
  EXPECT_FALSE(ObjectReference::FromObject(json{{"kind", "Node"}, {"metadata", {{"name", "n"}}}})
                   .ToJson()
                   .contains("namespace"));
}

TEST(EventRecorderTest, ValidatesOptions) {
  RestConfig rest;
  rest.server = "https://127.0.0.1:1";
  auto client = Client::New(rest);
  ASSERT_TRUE(client.ok()) << client.status();
  EventRecorderOptions options;
  EXPECT_FALSE(EventRecorder::New(client->get(), options).ok());
  options.reporting_controller = "nvidia.com/test";
  options.reporting_instance = "i";
  EXPECT_TRUE(EventRecorder::New(client->get(), options).ok());
  options.queue_capacity = 0;
  EXPECT_FALSE(EventRecorder::New(client->get(), options).ok());
}

}  // namespace
}  // namespace nvdra::k8s
