// The aio cache (aio_cache.h): device identity by stat + statfs, the cache
// file's JSON shape (version 1), and an atomic write (temporary file, fsync,
// rename, fsync of the folder).
#include "core/config/aio_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dscore::config {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kCacheVersion = 1;

std::string errno_text(int err) { return std::strerror(err); }

// statfs f_type values of the file systems NVMe offload meets (linux/magic.h).
std::string fs_type_name(uint64_t magic) {
  struct Known {
    uint64_t magic;
    const char* name;
  };
  static const Known kKnown[] = {
      {0xEF53, "ext4"},      {0x58465342, "xfs"},   {0x9123683E, "btrfs"},   {0xF2F52010, "f2fs"},
      {0x2FC12FC1, "zfs"},   {0x01021994, "tmpfs"}, {0x794C7630, "overlay"}, {0x6969, "nfs"},
      {0xFF534D42, "cifs"},  {0x65735546, "fuse"},  {0x5346544E, "ntfs"},    {0x4D44, "vfat"},
      {0x858458F6, "ramfs"}, {0x7461636F, "ocfs2"}, {0x47504653, "gpfs"},    {0x0BD00BD0, "lustre"},
  };
  for (const Known& k : kKnown)
    if (k.magic == magic) return k.name;
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(magic));
  return hex;
}

Status read_text(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(errno_text(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error(errno_text(errno));
  *out = text.str();
  return Status::Ok();
}

Result<int64_t> positive_int(const json::Value& v, const char* key) {
  const json::Value* x = v.find(key);
  if (!x || !x->is_integral() || x->as_int() < 1)
    return invalid_argument(std::string("\"") + key + "\" is missing or not a positive integer");
  return x->as_int();
}

Result<bool> boolean(const json::Value& v, const char* key) {
  const json::Value* x = v.find(key);
  if (!x || !x->is_bool())
    return invalid_argument(std::string("\"") + key + "\" is missing or not true/false");
  return x->as_bool();
}

double number_or_zero(const json::Value& v, const char* key) {
  const json::Value* x = v.find(key);
  return x && x->is_number() ? x->as_number() : 0.0;
}

std::string string_or_empty(const json::Value& v, const char* key) {
  const json::Value* x = v.find(key);
  return x && x->is_string() ? x->as_string() : std::string();
}

}  // namespace

std::string DeviceId::text() const {
  return std::to_string(major) + ":" + std::to_string(minor) + " " + fs_type;
}

std::string DeviceId::file_name() const {
  return std::to_string(major) + "-" + std::to_string(minor) + "-" + fs_type + ".json";
}

Result<DeviceId> device_of(const std::string& path) {
  if (path.empty()) return invalid_argument("an empty path has no device");
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return io_error("cannot resolve " + path + ": " + ec.message());
  // The nearest part of the path that exists: nvme_path may be created by the run.
  struct stat st;
  while (::stat(p.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      return io_error("cannot stat " + p.string() + ": " + errno_text(errno));
    if (!p.has_relative_path()) return io_error("no part of " + path + " exists");
    p = p.parent_path();
  }
  struct statfs sfs;
  if (::statfs(p.c_str(), &sfs) != 0)
    return io_error("cannot statfs " + p.string() + ": " + errno_text(errno));
  DeviceId id;
  id.major = ::major(st.st_dev);
  id.minor = ::minor(st.st_dev);
  id.fs_type = fs_type_name(static_cast<uint64_t>(sfs.f_type));
  return id;
}

std::string aio_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  // The XDG spec: a relative XDG_CACHE_HOME is invalid and is ignored.
  if (xdg && xdg[0] == '/') return (fs::path(xdg) / "dscore" / "aio").string();
  const char* home = std::getenv("HOME");
  if (home && home[0] != '\0') return (fs::path(home) / ".cache" / "dscore" / "aio").string();
  return "";
}

json::Value aio_cache_json(const DeviceId& device, const MeasuredAio& m) {
  json::Value out = json::Value::object();
  out.set("version", json::Value(kCacheVersion));
  out.set("device", json::Value(device.text()));
  out.set("path", json::Value(m.path));
  out.set("measured_at", json::Value(m.measured_at));
  out.set("aio", aio_json(m));
  out.set("read_gbps", json::Value(m.read_gbps));
  out.set("write_gbps", json::Value(m.write_gbps));
  out.set("probe_read_gbps", json::Value(m.probe_read_gbps));
  out.set("probe_write_gbps", json::Value(m.probe_write_gbps));
  return out;
}

Result<MeasuredAio> aio_cache_from_json(const json::Value& v, const DeviceId& device) {
  if (!v.is_object()) return invalid_argument("not a JSON object");
  const json::Value* version = v.find("version");
  if (!version || !version->is_integral() || version->as_int() != kCacheVersion)
    return invalid_argument("\"version\" is not " + std::to_string(kCacheVersion));
  const std::string written_for = string_or_empty(v, "device");
  if (written_for != device.text())
    return invalid_argument("written for device \"" + written_for + "\", not " + device.text());
  const json::Value* aio = v.find("aio");
  if (!aio || !aio->is_object()) return invalid_argument("\"aio\" is missing or not an object");
  MeasuredAio m;
  DSCORE_ASSIGN_OR_RETURN(m.block_size, positive_int(*aio, "block_size"));
  DSCORE_ASSIGN_OR_RETURN(m.queue_depth, positive_int(*aio, "queue_depth"));
  DSCORE_ASSIGN_OR_RETURN(m.intra_op_parallelism, positive_int(*aio, "intra_op_parallelism"));
  DSCORE_ASSIGN_OR_RETURN(m.single_submit, boolean(*aio, "single_submit"));
  DSCORE_ASSIGN_OR_RETURN(m.overlap_events, boolean(*aio, "overlap_events"));
  m.read_gbps = number_or_zero(v, "read_gbps");
  m.write_gbps = number_or_zero(v, "write_gbps");
  m.probe_read_gbps = number_or_zero(v, "probe_read_gbps");
  m.probe_write_gbps = number_or_zero(v, "probe_write_gbps");
  m.path = string_or_empty(v, "path");
  m.measured_at = string_or_empty(v, "measured_at");
  return m;
}

AioCacheLookup read_aio_cache(const DeviceId& device) {
  AioCacheLookup out;
  const std::string dir = aio_cache_dir();
  if (dir.empty()) return out;
  out.file = (fs::path(dir) / device.file_name()).string();
  std::string text;
  if (::access(out.file.c_str(), F_OK) != 0) return out;  // never measured
  const std::string fix = "; ignored (run `dscore io-bench` again to rewrite it)";
  if (Status st = read_text(out.file, &text); !st.ok()) {
    out.warning = "cannot read " + out.file + ": " + st.message() + fix;
    return out;
  }
  Result<json::Value> parsed = json::parse(text, out.file);
  if (!parsed.ok()) {
    out.warning = "corrupt aio cache " + parsed.status().message() + fix;
    return out;
  }
  Result<MeasuredAio> measured = aio_cache_from_json(*parsed, device);
  if (!measured.ok()) {
    out.warning = "corrupt aio cache " + out.file + ": " + measured.status().message() + fix;
    return out;
  }
  out.measured = *measured;
  return out;
}

Result<std::string> write_aio_cache(const DeviceId& device, const MeasuredAio& measured) {
  const std::string dir = aio_cache_dir();
  if (dir.empty())
    return failed_precondition("no cache folder: set HOME or XDG_CACHE_HOME (an absolute path)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  const std::string file = (fs::path(dir) / device.file_name()).string();
  std::string tmp = file + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return io_error("cannot create a file in " + dir + ": " + errno_text(errno));
  const std::string text = json::serialize(aio_cache_json(device, measured), true) + "\n";
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), file.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return io_error("cannot write " + file + ": " + errno_text(err));
  }
  // The rename is durable once the folder is.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return file;
}

}  // namespace dscore::config
