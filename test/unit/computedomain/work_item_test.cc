// Work items: each kind is its own queue item, so one kind's backoff or
// de-duplication never swallows another's.

#include "computedomain/controller/work_item.h"

#include <stop_token>

#include <gtest/gtest.h>

#include "k8s/workqueue/workqueue.h"

namespace nvdra::computedomain::controller {
namespace {

TEST(WorkItemTest, SameKeyOfAnotherKindIsAnotherItem) {
  k8s::workqueue::WorkQueue<WorkItem, WorkItemHash> queue;
  queue.Add(WorkItem::Domain("ns/cd"));
  queue.Add(WorkItem::Cliques("ns/cd"));
  queue.Add(WorkItem::Domain("ns/cd"));  // de-duplicated
  EXPECT_EQ(queue.Len(), 2u);
  std::optional<WorkItem> first = queue.Get(std::stop_token());
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, WorkItem::Domain("ns/cd"));
  queue.AddRateLimited(*first);
  EXPECT_EQ(queue.NumRequeues(WorkItem::Domain("ns/cd")), 1u);
  EXPECT_EQ(queue.NumRequeues(WorkItem::Cliques("ns/cd")), 0u);
}

TEST(WorkItemTest, LogsShowTheKindAsBefore) {
  EXPECT_EQ(WorkItem::Domain("ns/cd").ToString(), "ns/cd");
  EXPECT_EQ(WorkItem::Cliques("ns/cd").ToString(), "cliques/ns/cd");
  EXPECT_EQ(WorkItem::GoneDomain("u1").ToString(), "gone/u1");
  EXPECT_EQ(WorkItem::AllocatedClaim("ns/c").ToString(), "allocated/ns/c");
}

}  // namespace
}  // namespace nvdra::computedomain::controller
