// HostContext (host_context.h) and the in-process key-value store.
#include "core/plugin_host/host_context.h"

#include <chrono>
#include <condition_variable>
#include <map>

namespace dscore::plugin_host {
namespace {

class InProcessKv : public KvBackend {
 public:
  Status set(const std::string& key, std::string value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = std::move(value);
    }
    changed_.notify_all();
    return Status::Ok();
  }

  Result<std::string> get(const std::string& key, int64_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto present = [&] { return values_.count(key) != 0; };
    if (timeout_ms < 0) {
      changed_.wait(lock, present);
    } else if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), present)) {
      return Status(DSCORE_DEADLINE_EXCEEDED, "key '" + key + "' was not published within " +
                                                  std::to_string(timeout_ms) + " ms");
    }
    return values_.at(key);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::shared_ptr<KvBackend> make_in_process_kv() { return std::make_shared<InProcessKv>(); }

HostContext::HostContext(std::shared_ptr<KvBackend> kv)
    : kv_(kv ? std::move(kv) : make_in_process_kv()),
      identity_(std::make_shared<EngineIdentity>()) {
  identity_->ledger = std::make_shared<MemoryLedger>();
  for (auto& c : communicators_) c.store(nullptr);
}

void HostContext::set_log_rank(int rank, int world_size) {
  identity_->log_rank = world_size > 1 ? rank : -1;
}

HostContext::~HostContext() = default;

Result<void*> HostContext::allocate_device(size_t bytes, size_t alignment, std::string_view tag) {
  if (device_ == nullptr || device_->type() != device::DeviceType::kCuda)
    return unimplemented(
        "host->alloc: device memory is not available: the engine computes on the CPU "
        "(\"device\" in the config)");
  // The CUDA pool hands out blocks aligned to at least 256 bytes.
  if (alignment > 256)
    return invalid_argument("host->alloc: device memory is aligned to 256 bytes, not " +
                            std::to_string(alignment));
  DSCORE_ASSIGN_OR_RETURN(
      device::Buffer buffer,
      device_->allocate(bytes, device::Placement::kDevice, MemoryUse::kOther, tag, /*zero=*/false));
  void* data = buffer.data();
  std::lock_guard<std::mutex> lock(device_mutex_);
  device_buffers_.emplace(data, std::move(buffer));
  return data;
}

bool HostContext::free_device(void* ptr) {
  std::lock_guard<std::mutex> lock(device_mutex_);
  return device_buffers_.erase(ptr) > 0;
}

dscore_status HostContext::record_error(dscore_status code, const char* message) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    LastError& e = errors_[std::this_thread::get_id()];
    e.set = true;
    e.code = code;
    try {
      e.message = message != nullptr ? message : "";
    } catch (...) {
      e.message.clear();  // out of memory: keep the code at least
    }
  } catch (...) {
  }
  return code;
}

std::optional<std::pair<dscore_status, std::string>> HostContext::take_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = errors_.find(std::this_thread::get_id());
  if (it == errors_.end() || !it->second.set) return std::nullopt;
  std::pair<dscore_status, std::string> out{it->second.code, std::move(it->second.message)};
  errors_.erase(it);
  return out;
}

void HostContext::clear_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.erase(std::this_thread::get_id());
}

void HostContext::set_communicator(dscore_comm_group group,
                                   const dscore_communicator* communicator) {
  if (group >= 0 && static_cast<size_t>(group) < kGroups) communicators_[group].store(communicator);
}

const dscore_communicator* HostContext::communicator(dscore_comm_group group) const {
  if (group < 0 || static_cast<size_t>(group) >= kGroups) return nullptr;
  return communicators_[group].load();
}

void HostContext::push_range(const char* name) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_[std::this_thread::get_id()].emplace_back(name != nullptr ? name : "");
}

void HostContext::pop_range() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.find(std::this_thread::get_id());
  // An unmatched pop is a plugin bug; ignoring it keeps other ranges intact.
  if (it == ranges_.end() || it->second.empty()) return;
  it->second.pop_back();
  if (it->second.empty()) ranges_.erase(it);
}

size_t HostContext::range_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.find(std::this_thread::get_id());
  return it == ranges_.end() ? 0 : it->second.size();
}

}  // namespace dscore::plugin_host
