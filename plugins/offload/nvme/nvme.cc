// The NVMe swapper "nvme" (offload.h): files opened with O_DIRECT (buffered
// where the file system refuses it), transfers through io_uring, or through
// a pool of pread/pwrite threads where io_uring is unavailable at run time
// or DSCORE_NVME_BACKEND=threads asks for it. Each fallback is logged once
// per process with its reason. Params: the config's top-level "aio" section.
#include <dscore/offload.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dscore/cpp/instance.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"

namespace dscore::nvme {
namespace {

using sdk::Error;

constexpr const char kPlugin[] = "nvme";
// O_DIRECT needs addresses, offsets and sizes in multiples of the device's
// logical block; 4096 covers every NVMe format in use.
constexpr size_t kAlignment = 4096;

// Log `message` once per process for each flag.
void log_once(std::atomic<bool>& flag, const sdk::HostRef& host, dscore_log_level level,
              const std::string& message) {
  if (!flag.exchange(true)) host.log(level, kPlugin, message);
}
std::atomic<bool> g_backend_logged{false};
std::atomic<bool> g_buffered_logged{false};
std::atomic<bool> g_register_logged{false};

std::string os_error_text(int error) { return std::strerror(error); }

class NvmeSwapper : public sdk::Instance {
 public:
  NvmeSwapper(sdk::HostRef host, const sdk::Params& p) : Instance(host) {
    BackendOptions options;
    options.queue_depth = static_cast<unsigned>(p.integer("queue_depth", 8));
    options.threads = static_cast<unsigned>(p.integer("intra_op_parallelism", 1));
    options.single_submit = p.boolean("single_submit", false);
    const char* env = std::getenv("DSCORE_NVME_BACKEND");
    const std::string wanted = env != nullptr ? env : "";
    if (wanted != "" && wanted != "auto" && wanted != "io_uring" && wanted != "threads")
      throw Error(DSCORE_INVALID_ARGUMENT, "DSCORE_NVME_BACKEND=" + wanted +
                                               " is not a backend; use io_uring, threads or auto");
    const std::string threads_text = std::to_string(options.threads) + " pread/pwrite thread(s)";
    if (wanted == "threads") {
      log_once(g_backend_logged, host, DSCORE_LOG_INFO,
               "DSCORE_NVME_BACKEND=threads: transfers run on " + threads_text);
    } else {
      std::string why;
      backend_ = make_uring_backend(options, &why);
      if (backend_ == nullptr && wanted == "io_uring")
        throw Error(DSCORE_UNAVAILABLE, "DSCORE_NVME_BACKEND=io_uring, but " + why +
                                            "; unset it to fall back to threads");
      if (backend_ == nullptr)
        log_once(g_backend_logged, host, DSCORE_LOG_WARNING,
                 why + "; falling back to " + threads_text + " (slower on fast drives)");
    }
    if (backend_ == nullptr) backend_ = make_thread_backend(options);
  }

  ~NvmeSwapper() override {
    backend_.reset();  // waits for every transfer
    for (const auto& [handle, file] : files_) ::close(file.fd);
  }

  const char* backend_name() const { return backend_->name(); }

  int64_t open_file(const char* path, uint32_t flags) {
    if (path == nullptr || *path == '\0')
      throw Error(DSCORE_INVALID_ARGUMENT, "open_file: no path");
    int mode = O_CLOEXEC;
    const bool r = (flags & DSCORE_OPEN_READ) != 0, w = (flags & DSCORE_OPEN_WRITE) != 0;
    if (!r && !w)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  std::string("open_file ") + path + ": flags name neither READ nor WRITE");
    mode |= r && w ? O_RDWR : (w ? O_WRONLY : O_RDONLY);
    if ((flags & DSCORE_OPEN_CREATE) != 0) mode |= O_CREAT;
    if ((flags & DSCORE_OPEN_TRUNCATE) != 0) mode |= O_TRUNC;
    int fd = ::open(path, mode | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
      fd = ::open(path, mode, 0644);
      if (fd >= 0)
        log_once(g_buffered_logged, host(), DSCORE_LOG_WARNING,
                 std::string("the file system of ") + path +
                     " refuses O_DIRECT; using buffered I/O there (swapped data also fills the "
                     "page cache; put nvme_path on a local ext4/xfs drive for direct I/O)");
    }
    if (fd < 0) {
      const int e = errno;
      throw Error(status_of_errno(e),
                  std::string("cannot open ") + path + ": " + os_error_text(e) +
                      (e == ENOENT ? " (create its folder first, or open with CREATE)" : ""));
    }
    const int64_t handle = next_handle_++;
    files_[handle] = {fd, path};
    return handle;
  }

  void close_file(int64_t file) {
    const File& f = find(file, "close_file");
    backend_->drain(file);
    const int fd = f.fd;
    files_.erase(file);
    if (::close(fd) != 0 && errno != EINTR)
      throw Error(status_of_errno(errno), "close failed: " + os_error_text(errno));
  }

  void sync_file(int64_t file) {
    const File& f = find(file, "sync_file");
    backend_->drain(file);
    if (::fsync(f.fd) != 0) {
      const int e = errno;
      throw Error(status_of_errno(e), "fsync of " + f.path + " failed: " + os_error_text(e));
    }
  }

  void submit(const dscore_io_request* const* requests, size_t count) {
    std::vector<Transfer> batch;
    batch.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const dscore_io_request* r = requests[i];
      if (r == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "submit: NULL request");
      const File& f = find(r->file, "submit");
      if (r->op != DSCORE_IO_READ && r->op != DSCORE_IO_WRITE)
        throw Error(DSCORE_INVALID_ARGUMENT, "submit: op " + std::to_string(r->op) +
                                                 " is neither DSCORE_IO_READ nor DSCORE_IO_WRITE");
      if (reinterpret_cast<uintptr_t>(r->buffer) % kAlignment != 0 || r->offset % kAlignment != 0 ||
          r->bytes % kAlignment != 0 || (r->buffer == nullptr && r->bytes > 0))
        throw Error(DSCORE_INVALID_ARGUMENT,
                    "submit: a transfer of " + std::to_string(r->bytes) + " bytes at offset " +
                        std::to_string(r->offset) + " of " + f.path +
                        " is not aligned to 4096 bytes (address, offset and size)");
      Transfer t;
      t.op = r->op;
      t.fd = f.fd;
      t.file = r->file;
      t.offset = r->offset;
      t.buffer = static_cast<char*>(r->buffer);
      t.bytes = r->bytes;
      t.user_data = r->user_data;
      batch.push_back(t);
    }
    backend_->submit(std::move(batch));
  }

  dscore_status wait(size_t min_count, int64_t timeout_ms, dscore_io_completion* const* out,
                     size_t capacity, size_t* count) {
    std::vector<Completion> done;
    const bool ready = backend_->wait(min_count, timeout_ms, capacity, &done);
    for (size_t i = 0; i < done.size(); ++i) {
      dscore_io_completion* c = out[i];
      c->user_data = done[i].user_data;
      c->status = done[i].status;
      c->bytes = done[i].bytes;
      if (DSCORE_HAS_FIELD(c, dscore_io_completion, os_error)) c->os_error = done[i].os_error;
    }
    *count = done.size();
    if (ready) return DSCORE_OK;
    if (timeout_ms < 0)
      return host().report(DSCORE_FAILED_PRECONDITION,
                           ("wait for " + std::to_string(min_count) + " completions, but only " +
                            std::to_string(done.size()) + " transfers were outstanding")
                               .c_str());
    return host().report(DSCORE_DEADLINE_EXCEEDED,
                         ("fewer than " + std::to_string(min_count) + " transfers completed in " +
                          std::to_string(timeout_ms) + " ms")
                             .c_str());
  }

  void register_buffers(void* const* buffers, const size_t* sizes, size_t count) {
    const std::string note = backend_->register_buffers(buffers, sizes, count);
    if (!note.empty()) log_once(g_register_logged, host(), DSCORE_LOG_WARNING, note);
  }

 private:
  struct File {
    int fd;
    std::string path;
  };
  const File& find(int64_t file, const char* what) const {
    auto it = files_.find(file);
    if (it == files_.end())
      throw Error(DSCORE_NOT_FOUND,
                  std::string(what) + ": no open file with handle " + std::to_string(file));
    return it->second;
  }

  std::unique_ptr<Backend> backend_;
  std::map<int64_t, File> files_;
  int64_t next_handle_ = 1;
};

using S = sdk::Shim<dscore_offload, NvmeSwapper>;

dscore_status create(const dscore_create_args* args, dscore_offload** out) {
  return S::create(args, out);
}
size_t alignment(const dscore_offload*) { return kAlignment; }
dscore_status open_file(dscore_offload* h, const char* path, uint32_t flags, int64_t* file) {
  return S::call(h, [&](NvmeSwapper& s) { *file = s.open_file(path, flags); });
}
dscore_status close_file(dscore_offload* h, int64_t file) {
  return S::call(h, [&](NvmeSwapper& s) { s.close_file(file); });
}
dscore_status sync_file(dscore_offload* h, int64_t file) {
  return S::call(h, [&](NvmeSwapper& s) { s.sync_file(file); });
}
dscore_status submit(dscore_offload* h, const dscore_io_request* const* requests, size_t count) {
  return S::call(h, [&](NvmeSwapper& s) { s.submit(requests, count); });
}
dscore_status wait(dscore_offload* h, size_t min_count, int64_t timeout_ms,
                   dscore_io_completion* const* out, size_t capacity, size_t* count) {
  *count = 0;
  return S::call(
      h, [&](NvmeSwapper& s) { return s.wait(min_count, timeout_ms, out, capacity, count); });
}
dscore_status register_buffers(dscore_offload* h, void* const* buffers, const size_t* sizes,
                               size_t count) {
  return S::call(h, [&](NvmeSwapper& s) { s.register_buffers(buffers, sizes, count); });
}
const char* backend(const dscore_offload* h) { return S::self(h).backend_name(); }

const dscore_offload_vtable kVtable = {sizeof(dscore_offload_vtable),
                                       &create,
                                       &S::destroy,
                                       &alignment,
                                       &open_file,
                                       &close_file,
                                       &sync_file,
                                       &submit,
                                       &wait,
                                       &register_buffers,
                                       &backend};

// The config's "aio" section (docs/deepspeed-reference.md#aio), as the
// host's Swapper passes it.
constexpr const char kParamsSchema[] = R"json({
  "block_size": {"type": "int", "default": 1048576, "min": 4096,
                 "doc": "bytes per request (the host splits transfers into requests of this size)"},
  "queue_depth": {"type": "int", "default": 8, "min": 1, "max": 32768,
                  "doc": "requests in flight (io_uring ring entries)"},
  "intra_op_parallelism": {"type": "int", "default": 1, "min": 1, "max": 256,
                           "doc": "threads of the pread/pwrite fallback"},
  "single_submit": {"type": "bool", "default": false,
                    "doc": "enter the kernel once per request instead of once per batch"},
  "overlap_events": {"type": "bool", "default": true,
                     "doc": "submit new requests while earlier ones complete (the host's pacing)"}
})json";

const dscore_plugin_descriptor kNvme = {sizeof(dscore_plugin_descriptor),
                                        DSCORE_KIND_OFFLOAD,
                                        "nvme",
                                        "0.1.0",
                                        "NVMe swapper: O_DIRECT files through io_uring "
                                        "(pread/pwrite threads where io_uring is unavailable)",
                                        DSCORE_CAP_CPU | DSCORE_CAP_MULTI_RANK,
                                        kParamsSchema,
                                        &kVtable};

}  // namespace
}  // namespace dscore::nvme

DSCORE_PLUGIN_LIBRARY("dscore-offload-nvme", "0.1.0", "dscore", &dscore::nvme::kNvme)
