#pragma once

// The IMEX channels handed out to ComputeDomains under channel isolation
// (--imex-isolation=channel), one per domain, in [1, channel_count). A
// channel is reserved here before it is written to the domain's status, so
// no other domain takes it meanwhile, and the reservation outlives the write
// until the domain's status shows it. Defines: ChannelReservation,
// ChannelRegistry.
//
// Ownership: owns the reservations. Thread-safety: thread-safe.

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/mutex.h"

namespace nvdra::computedomain::controller {

struct ChannelReservation {
  int channel = 0;
  // The domain's status does not show it yet: write it there.
  bool needs_write = false;
};

class ChannelRegistry {
 public:
  explicit ChannelRegistry(int channel_count) : channel_count_(channel_count) {}

  // The channel of domain `uid`. `recorded`: its status.imexChannelID, kept
  // when set. Else the one reserved for it before, or the lowest channel
  // neither reserved nor in `recorded_elsewhere` (other domains' status),
  // reserved now. nullopt when all are taken.
  std::optional<ChannelReservation> Reserve(const std::string& uid, std::optional<int> recorded,
                                            const std::set<int>& recorded_elsewhere);
  // Domain `uid` holds `channel` (its status says so).
  void Record(const std::string& uid, int channel);
  // The domain is gone: its channel is free again.
  void Forget(const std::string& uid);

 private:
  const int channel_count_;

  common::Mutex channels_mu_;
  std::map<std::string, int> channels_ GUARDED_BY(channels_mu_);  // domain UID -> channel handed out
};

}  // namespace nvdra::computedomain::controller
