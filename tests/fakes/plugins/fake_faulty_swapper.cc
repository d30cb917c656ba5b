// Offload plugin "fake_faulty_swapper": plain buffered pread/pwrite done at
// submit(), with one fault injected into the Nth request (1-based, params
// "fail_request"; 0 = none): "eio" fails it with EIO, "enospc" with ENOSPC,
// "short_read" reports a read as OK with half its bytes (a plugin breaking
// the ABI's all-or-error rule). Every later request works again, so the
// host's stickiness, not the plugin, is what stops further transfers.
// Accepts the "aio" keys the host's Swapper passes.
#include <dscore/offload.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <dscore/cpp/instance.hpp>
#include <map>
#include <string>

namespace {

using dscore::sdk::Error;

class FaultySwapper : public dscore::sdk::Instance {
 public:
  FaultySwapper(dscore::sdk::HostRef host, const dscore::sdk::Params& p)
      : Instance(host), fail_at_(p.integer("fail_request", 0)), fault_(p.string("fault", "eio")) {
    if (fault_ != "eio" && fault_ != "enospc" && fault_ != "short_read")
      throw Error(DSCORE_INVALID_ARGUMENT, "fault must be eio, enospc or short_read");
  }
  ~FaultySwapper() override {
    for (const auto& [h, fd] : files_) ::close(fd);
  }

  int64_t open(const char* path, uint32_t flags) {
    int mode = O_RDWR | O_CLOEXEC;
    if (flags & DSCORE_OPEN_CREATE) mode |= O_CREAT;
    if (flags & DSCORE_OPEN_TRUNCATE) mode |= O_TRUNC;
    const int fd = ::open(path, mode, 0644);
    if (fd < 0) throw Error(DSCORE_NOT_FOUND, std::string("cannot open ") + path);
    files_[next_] = fd;
    return next_++;
  }
  void close(int64_t file) {
    ::close(fd_of(file));
    files_.erase(file);
  }
  void sync(int64_t file) { ::fsync(fd_of(file)); }

  void submit(const dscore_io_request* const* requests, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      const dscore_io_request& r = *requests[i];
      dscore_io_completion c{};
      c.user_data = r.user_data;
      const int fd = fd_of(r.file);
      seen_ += 1;
      if (seen_ == fail_at_ && fault_ != "short_read") {
        c.status = fault_ == "eio" ? DSCORE_UNAVAILABLE : DSCORE_RESOURCE_EXHAUSTED;
        c.os_error = fault_ == "eio" ? EIO : ENOSPC;
        done_.push_back(c);
        continue;
      }
      const ssize_t n = r.op == DSCORE_IO_READ
                            ? ::pread(fd, r.buffer, r.bytes, static_cast<off_t>(r.offset))
                            : ::pwrite(fd, r.buffer, r.bytes, static_cast<off_t>(r.offset));
      if (n < 0) {
        c.status = DSCORE_INTERNAL;
        c.os_error = errno;
      } else {
        c.bytes = static_cast<size_t>(n);
        if (seen_ == fail_at_) c.bytes /= 2;  // short_read, reported as OK
        if (c.bytes < r.bytes && seen_ != fail_at_) c.status = DSCORE_DATA_LOSS;
      }
      done_.push_back(c);
    }
  }

  dscore_status wait(size_t min_count, dscore_io_completion* const* out, size_t capacity,
                     size_t* count) {
    size_t n = 0;
    while (n < capacity && !done_.empty()) {
      const dscore_io_completion& c = done_.front();
      out[n]->user_data = c.user_data;
      out[n]->status = c.status;
      out[n]->bytes = c.bytes;
      if (DSCORE_HAS_FIELD(out[n], dscore_io_completion, os_error)) out[n]->os_error = c.os_error;
      done_.pop_front();
      n += 1;
    }
    *count = n;
    return n >= min_count ? DSCORE_OK
                          : host().report(DSCORE_DEADLINE_EXCEEDED, "fewer completions than asked");
  }

 private:
  int fd_of(int64_t file) const {
    auto it = files_.find(file);
    if (it == files_.end()) throw Error(DSCORE_NOT_FOUND, "no such file handle");
    return it->second;
  }
  int64_t fail_at_;
  std::string fault_;
  int64_t seen_ = 0;
  int64_t next_ = 1;
  std::map<int64_t, int> files_;
  std::deque<dscore_io_completion> done_;
};

using S = dscore::sdk::Shim<dscore_offload, FaultySwapper>;

dscore_status create(const dscore_create_args* args, dscore_offload** out) {
  return S::create(args, out);
}
size_t alignment(const dscore_offload*) { return 4096; }
dscore_status open_file(dscore_offload* h, const char* path, uint32_t flags, int64_t* file) {
  return S::call(h, [&](FaultySwapper& s) { *file = s.open(path, flags); });
}
dscore_status close_file(dscore_offload* h, int64_t file) {
  return S::call(h, [&](FaultySwapper& s) { s.close(file); });
}
dscore_status sync_file(dscore_offload* h, int64_t file) {
  return S::call(h, [&](FaultySwapper& s) { s.sync(file); });
}
dscore_status submit(dscore_offload* h, const dscore_io_request* const* requests, size_t count) {
  return S::call(h, [&](FaultySwapper& s) { s.submit(requests, count); });
}
dscore_status wait(dscore_offload* h, size_t min_count, int64_t, dscore_io_completion* const* out,
                   size_t capacity, size_t* count) {
  *count = 0;
  return S::call(h, [&](FaultySwapper& s) { return s.wait(min_count, out, capacity, count); });
}
const char* backend(const dscore_offload*) { return "fake"; }

const dscore_offload_vtable kVtable = {sizeof(dscore_offload_vtable),
                                       &create,
                                       &S::destroy,
                                       &alignment,
                                       &open_file,
                                       &close_file,
                                       &sync_file,
                                       &submit,
                                       &wait,
                                       nullptr,
                                       &backend};

constexpr const char kSchema[] = R"json({
  "fail_request": {"type": "int", "default": 0, "min": 0},
  "fault": {"type": "string", "default": "eio", "enum": ["eio", "enospc", "short_read"]},
  "block_size": {"type": "int"},
  "queue_depth": {"type": "int"},
  "intra_op_parallelism": {"type": "int"},
  "single_submit": {"type": "bool"},
  "overlap_events": {"type": "bool"}
})json";

const dscore_plugin_descriptor kFaulty = {sizeof(dscore_plugin_descriptor),
                                          DSCORE_KIND_OFFLOAD,
                                          "fake_faulty_swapper",
                                          "0.1.0",
                                          "test swapper that fails one chosen request",
                                          DSCORE_CAP_CPU,
                                          kSchema,
                                          &kVtable};

}  // namespace

DSCORE_PLUGIN_LIBRARY("fake-faulty-swapper", "0.1.0", "dscore tests", &kFaulty)
