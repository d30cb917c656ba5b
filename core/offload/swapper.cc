// The Swapper (swapper.h): callers queue jobs (one per read()/write()) and
// commands (open, close, sync, register); the I/O thread alone calls the
// plugin: it runs commands, cuts queued jobs into block_size requests while
// fewer than queue_depth are in flight, and reaps completions into the
// jobs. The first failed request fails its job and makes the failure
// sticky: queued jobs fail with it and new ones are refused.
#include "core/offload/swapper.h"
#include "core/base/engine_scope.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/offload/io_error.h"
#include "core/plugin_host/params.h"

namespace dscore::offload {

struct Swapper::Impl {
  struct File {
    std::string path;
    int64_t handle = -1;
    bool open = false;
  };
  struct Job {
    Ticket ticket = 0;
    int file = -1;
    dscore_io_op op = DSCORE_IO_READ;
    uint64_t offset = 0;
    char* buffer = nullptr;
    size_t bytes = 0;
    size_t issued = 0;       // bytes handed to the plugin
    size_t outstanding = 0;  // its requests in flight
    bool done = false;
    Status status;
  };
  struct Piece {  // one request in flight
    Job* job;
    uint64_t offset;
    size_t bytes;
  };
  struct Command {
    std::function<Status()> run;
    Status result;
    bool done = false;
  };

  std::unique_ptr<plugin_host::OffloadInstance> plugin;
  config::AioConfig settings;
  size_t alignment = 1;

  mutable std::mutex mu;
  std::condition_variable wake;                 // the I/O thread
  std::condition_variable finished;             // callers waiting for jobs and commands
  std::deque<File> files;                       // stable addresses: path() hands out references
  std::map<Ticket, std::unique_ptr<Job>> jobs;  // until wait()ed
  std::deque<Job*> queue;                       // not yet fully issued
  std::deque<Command*> commands;
  std::unordered_map<uint64_t, Piece> pieces;  // by request user_data
  size_t undone = 0;                           // jobs not done, in all
  std::unordered_map<int, size_t> undone_in;   // per file
  uint64_t next_piece = 1;
  Ticket next_ticket = 1;
  Status failure;  // sticky
  bool stopping = false;
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
  std::thread io;

  void run();
  bool can_issue(bool batch_open) const {
    return !queue.empty() && pieces.size() < static_cast<size_t>(settings.queue_depth) &&
           (settings.overlap_events || batch_open);
  }
  std::vector<dscore_io_request> issue();
  void complete(const dscore_io_completion& c);
  void fail_job(Job* job, const Status& st);
  void fail_queued();
  void finish_if_done(Job* job);
  Status post(std::function<Status()> fn);
  void wait_for_file(std::unique_lock<std::mutex>& lock, int file);
  Status check_file(int file) const;
  Result<Ticket> enqueue(dscore_io_op op, int file, uint64_t offset, char* buffer, size_t bytes);
};

// ------------------------------------------------------------ the I/O thread

void Swapper::Impl::run() {
  std::vector<dscore_io_completion> done;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    wake.wait(lock,
              [&] { return stopping || !commands.empty() || !pieces.empty() || can_issue(true); });
    while (!commands.empty()) {
      Command* c = commands.front();
      commands.pop_front();
      lock.unlock();
      Status st = c->run();
      lock.lock();
      c->result = std::move(st);
      c->done = true;
      finished.notify_all();
    }
    if (!failure.ok()) fail_queued();
    std::vector<dscore_io_request> batch = issue();
    if (!batch.empty()) {
      lock.unlock();
      Status st = plugin->submit(batch);
      lock.lock();
      if (!st.ok()) {
        for (const dscore_io_request& r : batch) {
          Piece p = pieces.at(r.user_data);
          pieces.erase(r.user_data);
          p.job->outstanding -= 1;
          fail_job(p.job, st);
        }
        fail_queued();
      }
    }
    if (!pieces.empty()) {
      lock.unlock();
      Status st = plugin->wait(1, -1, static_cast<size_t>(settings.queue_depth), &done);
      lock.lock();
      for (const dscore_io_completion& c : done) complete(c);
      if (!st.ok() && done.empty()) {
        // The plugin cannot reap: nothing in flight will ever complete.
        std::vector<Job*> stuck;
        for (auto& [id, p] : pieces) {
          p.job->outstanding = 0;
          stuck.push_back(p.job);
        }
        pieces.clear();
        for (Job* j : stuck) fail_job(j, st);
        fail_queued();
      }
      finished.notify_all();
    } else if (stopping && queue.empty() && commands.empty()) {
      return;
    }
  }
}

std::vector<dscore_io_request> Swapper::Impl::issue() {
  std::vector<dscore_io_request> batch;
  const bool batch_open = pieces.empty();
  while (can_issue(batch_open)) {
    Job* j = queue.front();
    const size_t n = std::min(static_cast<size_t>(settings.block_size), j->bytes - j->issued);
    const uint64_t id = next_piece++;
    pieces[id] = Piece{j, j->offset + j->issued, n};
    batch.push_back(dscore_io_request{sizeof(dscore_io_request), j->op, files[j->file].handle,
                                      j->offset + j->issued, j->buffer + j->issued, n, id});
    j->issued += n;
    j->outstanding += 1;
    if (j->issued == j->bytes) queue.pop_front();
  }
  return batch;
}

void Swapper::Impl::complete(const dscore_io_completion& c) {
  auto it = pieces.find(c.user_data);
  if (it == pieces.end()) return;  // not ours (the instance checks counts, not ids)
  Piece p = it->second;
  pieces.erase(it);
  Job* j = p.job;
  j->outstanding -= 1;
  (j->op == DSCORE_IO_READ ? bytes_read : bytes_written) += std::min(c.bytes, p.bytes);
  if (c.status != DSCORE_OK || c.bytes != p.bytes) {
    IoFailure f{j->op == DSCORE_IO_WRITE,
                files[j->file].path,
                p.offset,
                p.bytes,
                std::min(c.bytes, p.bytes),
                c.status,
                c.os_error};
    fail_job(j, io_error(f));
    return;
  }
  finish_if_done(j);
}

void Swapper::Impl::fail_job(Job* job, const Status& st) {
  if (job->status.ok()) job->status = st;
  if (failure.ok()) failure = st;
  // Stop issuing the rest of it.
  auto it = std::find(queue.begin(), queue.end(), job);
  if (it != queue.end()) queue.erase(it);
  job->issued = job->bytes;
  finish_if_done(job);
}

void Swapper::Impl::fail_queued() {
  while (!queue.empty()) {
    Job* j = queue.front();
    queue.pop_front();
    if (j->status.ok())
      j->status =
          Status(failure.code(), "not done, an earlier transfer failed: " + failure.message());
    j->issued = j->bytes;
    finish_if_done(j);
  }
}

void Swapper::Impl::finish_if_done(Job* job) {
  if (job->issued == job->bytes && job->outstanding == 0 && !job->done) {
    job->done = true;
    undone -= 1;
    undone_in[job->file] -= 1;
    finished.notify_all();
  }
}

// ------------------------------------------------------------ callers' side

Status Swapper::Impl::post(std::function<Status()> fn) {
  Command c{std::move(fn), Status::Ok(), false};
  std::unique_lock<std::mutex> lock(mu);
  commands.push_back(&c);
  wake.notify_one();
  finished.wait(lock, [&] { return c.done; });
  return c.result;
}

void Swapper::Impl::wait_for_file(std::unique_lock<std::mutex>& lock, int file) {
  finished.wait(lock, [&] { return undone_in[file] == 0; });
}

Status Swapper::Impl::check_file(int file) const {
  if (file < 0 || static_cast<size_t>(file) >= files.size() || !files[file].open)
    return Status(DSCORE_NOT_FOUND,
                  "swapper: no open file number " + std::to_string(file) + " (open() gives them)");
  return Status::Ok();
}

Result<Swapper::Ticket> Swapper::Impl::enqueue(dscore_io_op op, int file, uint64_t offset,
                                               char* buffer, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (!failure.ok()) return failure;
  DSCORE_RETURN_IF_ERROR(check_file(file));
  const auto address = reinterpret_cast<uintptr_t>(buffer);
  if (address % alignment != 0 || offset % alignment != 0 || bytes % alignment != 0)
    return invalid_argument(std::string(op == DSCORE_IO_READ ? "reading " : "writing ") +
                            files[file].path + " at byte offset " + std::to_string(offset) + " (" +
                            std::to_string(bytes) + " bytes, buffer at 0x" +
                            [&] {
                              char hex[32];
                              std::snprintf(hex, sizeof hex, "%zx", static_cast<size_t>(address));
                              return std::string(hex);
                            }() +
                            "): the buffer address, offset and size must be multiples of " +
                            std::to_string(alignment) +
                            " bytes for direct I/O; allocate with that alignment and pad sizes");
  auto job = std::make_unique<Job>();
  Job* j = job.get();
  j->ticket = next_ticket++;
  j->file = file;
  j->op = op;
  j->offset = offset;
  j->buffer = buffer;
  j->bytes = bytes;
  jobs[j->ticket] = std::move(job);
  if (bytes == 0) {
    j->done = true;
  } else {
    undone += 1;
    undone_in[file] += 1;
    queue.push_back(j);
    wake.notify_one();
  }
  return j->ticket;
}

// ------------------------------------------------------------------ Swapper

Result<std::unique_ptr<Swapper>> Swapper::create(
    std::unique_ptr<plugin_host::OffloadInstance> plugin, const config::AioConfig& settings) {
  DSCORE_CHECK(plugin != nullptr, "Swapper::create needs a plugin instance");
  const size_t alignment = plugin->alignment();
  if (settings.block_size < 1 || static_cast<size_t>(settings.block_size) % alignment != 0)
    return invalid_argument("aio.block_size " + std::to_string(settings.block_size) +
                            " is not a multiple of " + std::to_string(alignment) + " bytes, the " +
                            plugin->info().display() +
                            " alignment; use a power of two such as 1048576");
  if (settings.queue_depth < 1)
    return invalid_argument("aio.queue_depth must be at least 1, not " +
                            std::to_string(settings.queue_depth));
  auto impl = std::make_unique<Impl>();
  impl->plugin = std::move(plugin);
  impl->settings = settings;
  impl->alignment = alignment;
  Impl* raw = impl.get();
  // The I/O thread works for the engine of the thread that makes it
  // (engine_scope.h).
  impl->io = std::thread([raw, engine = EngineScope::current()] {
    EngineScope scope(engine);
    raw->run();
  });
  return std::unique_ptr<Swapper>(new Swapper(std::move(impl)));
}

Swapper::Swapper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Swapper::~Swapper() {
  (void)wait_all();
  for (size_t f = 0; f < impl_->files.size(); ++f)
    if (impl_->files[f].open) (void)close(static_cast<int>(f));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_one();
  impl_->io.join();
}

size_t Swapper::alignment() const { return impl_->alignment; }
const std::string& Swapper::backend() const { return impl_->plugin->backend(); }
const config::AioConfig& Swapper::settings() const { return impl_->settings; }

const std::string& Swapper::path(int file) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  DSCORE_CHECK(file >= 0 && static_cast<size_t>(file) < impl_->files.size(),
               "swapper: no file number " + std::to_string(file));
  return impl_->files[file].path;
}

Result<int> Swapper::open(const std::string& path, uint32_t flags) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->failure.ok()) return impl_->failure;
  }
  int64_t handle = -1;
  DSCORE_RETURN_IF_ERROR(impl_->post([&]() -> Status {
    Result<int64_t> h = impl_->plugin->open_file(path, flags);
    if (!h.ok()) return h.status();
    handle = *h;
    return Status::Ok();
  }));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->files.push_back(Impl::File{path, handle, true});
  return static_cast<int>(impl_->files.size() - 1);
}

Status Swapper::close(int file) {
  int64_t handle = -1;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    DSCORE_RETURN_IF_ERROR(impl_->check_file(file));
    impl_->wait_for_file(lock, file);
    impl_->files[file].open = false;
    handle = impl_->files[file].handle;
  }
  return impl_->post([&] { return impl_->plugin->close_file(handle); });
}

Status Swapper::sync(int file) {
  int64_t handle = -1;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    DSCORE_RETURN_IF_ERROR(impl_->check_file(file));
    impl_->wait_for_file(lock, file);
    if (!impl_->failure.ok()) return impl_->failure;
    handle = impl_->files[file].handle;
  }
  return impl_->post([&] { return impl_->plugin->sync_file(handle); });
}

Status Swapper::register_buffers(const std::vector<std::pair<void*, size_t>>& buffers) {
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->finished.wait(lock, [&] { return impl_->undone == 0; });
  }
  std::vector<void*> addresses;
  std::vector<size_t> sizes;
  for (const auto& [p, n] : buffers) {
    addresses.push_back(p);
    sizes.push_back(n);
  }
  return impl_->post([&] { return impl_->plugin->register_buffers(addresses, sizes); });
}

Result<Swapper::Ticket> Swapper::read(int file, uint64_t offset, void* buffer, size_t bytes) {
  return impl_->enqueue(DSCORE_IO_READ, file, offset, static_cast<char*>(buffer), bytes);
}

Result<Swapper::Ticket> Swapper::write(int file, uint64_t offset, const void* buffer,
                                       size_t bytes) {
  // The plugin only reads from a write's buffer.
  return impl_->enqueue(DSCORE_IO_WRITE, file, offset,
                        static_cast<char*>(const_cast<void*>(buffer)), bytes);
}

Status Swapper::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto it = impl_->jobs.find(ticket);
  if (it == impl_->jobs.end())
    return invalid_argument("swapper: ticket " + std::to_string(ticket) +
                            " is not pending (already waited for, or not issued by this swapper)");
  Impl::Job* j = it->second.get();
  impl_->finished.wait(lock, [&] { return j->done; });
  Status st = j->status;
  impl_->jobs.erase(ticket);
  return st;
}

bool Swapper::done(Ticket ticket) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->jobs.find(ticket);
  return it == impl_->jobs.end() || it->second->done;
}

Status Swapper::wait_all() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->finished.wait(lock, [&] { return impl_->undone == 0; });
  Status first = impl_->failure;
  for (const auto& [t, j] : impl_->jobs)
    if (first.ok() && !j->status.ok()) first = j->status;
  impl_->jobs.clear();
  return first;
}

Status Swapper::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

uint64_t Swapper::bytes_read() const { return impl_->bytes_read.load(); }
uint64_t Swapper::bytes_written() const { return impl_->bytes_written.load(); }

// ------------------------------------------------------------------ factory

Result<std::unique_ptr<Swapper>> make_swapper(const plugin_host::PluginRegistry& registry,
                                              const config::AioConfig& settings,
                                              const plugin_host::InstanceContext& context,
                                              const std::string& plugin,
                                              const json::Value& extra_params) {
  DSCORE_ASSIGN_OR_RETURN(const plugin_host::PluginInfo* info,
                          registry.find(DSCORE_KIND_OFFLOAD, plugin));
  json::Value params = config::aio_json(settings);
  if (extra_params.is_object())
    for (const auto& m : extra_params.members()) params.set(m.key, m.value);
  std::vector<config::ConfigError> errors;
  std::vector<config::ConfigNotice> notices;
  plugin_host::ValidatedParams validated =
      plugin_host::validate_params(*info, params, "aio", {}, &errors, &notices);
  if (!errors.empty()) {
    std::string text;
    for (const config::ConfigError& e : errors)
      text += (text.empty() ? "" : "; ") + e.path + ": " + e.message;
    return invalid_argument(info->display() + " refuses the \"aio\" settings: " + text);
  }
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<plugin_host::OffloadInstance> instance,
                          plugin_host::OffloadInstance::create(*info, validated, context));
  return Swapper::create(std::move(instance), settings);
}

}  // namespace dscore::offload
