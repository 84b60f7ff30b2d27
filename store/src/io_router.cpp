#include "goblin/store/io_router.h"

namespace goblin::store {

uint64_t IoRouter::Register(IoClient* client) {
  uint64_t id = next_client_++;
  clients_.emplace(id, client);
  return id;
}

void IoRouter::Unregister(uint64_t client) { clients_.erase(client); }

bool IoRouter::Submit(uint64_t client, uint32_t tag, const IoRequest& request, uint32_t buffer,
                      uint32_t* in_flight) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(pending_.size());
    pending_.push_back({});
  }
  IoRequest r = request;
  r.user_data = slot;
  if (!engine_->Submit(r)) {
    free_.push_back(slot);
    return false;
  }
  pending_[slot] = Pending{client, tag, buffer, in_flight};
  if (in_flight != nullptr) ++*in_flight;
  return true;
}

Result<size_t> IoRouter::Poll(uint32_t min_complete) {
  size_t total = 0;
  for (;;) {
    IoCompletion c[32];
    uint32_t want = total >= min_complete ? 0 : min_complete - static_cast<uint32_t>(total);
    GOBLIN_ASSIGN_OR_RETURN(size_t n, engine_->Reap(c, want));
    for (size_t i = 0; i < n; ++i) {
      uint32_t slot = static_cast<uint32_t>(c[i].user_data);
      Pending p = pending_[slot];
      free_.push_back(slot);
      if (p.in_flight != nullptr) --*p.in_flight;
      auto it = clients_.find(p.client);
      if (it != clients_.end()) {
        it->second->OnIoComplete(p.tag, c[i].result);
      } else {
        ++orphaned_;
        if (p.buffer != kNoBuffer) buffers_->Release(p.buffer);
      }
    }
    total += n;
    if (n < std::size(c)) break;
  }
  return total;
}

}  // namespace goblin::store
