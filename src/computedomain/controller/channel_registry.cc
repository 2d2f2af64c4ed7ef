#include "computedomain/controller/channel_registry.h"

#include "computedomain/controller/indexes.h"

namespace nvdra::computedomain::controller {

std::optional<ChannelReservation> ChannelRegistry::Reserve(const std::string& uid, std::optional<int> recorded,
                                                           const std::set<int>& recorded_elsewhere) {
  common::MutexLock lock(channels_mu_);
  if (recorded) {
    channels_[uid] = *recorded;
    return ChannelReservation{.channel = *recorded, .needs_write = false};
  }
  if (auto it = channels_.find(uid); it != channels_.end()) {
    return ChannelReservation{.channel = it->second, .needs_write = true};
  }
  std::set<int> used = recorded_elsewhere;
  for (const auto& [other, id] : channels_) used.insert(id);
  std::optional<int> free = AssignChannel(used, channel_count_);
  if (!free) return std::nullopt;
  channels_[uid] = *free;
  return ChannelReservation{.channel = *free, .needs_write = true};
}

void ChannelRegistry::Record(const std::string& uid, int channel) {
  common::MutexLock lock(channels_mu_);
  channels_[uid] = channel;
}

void ChannelRegistry::Forget(const std::string& uid) {
  common::MutexLock lock(channels_mu_);
  channels_.erase(uid);
}

}  // namespace nvdra::computedomain::controller
