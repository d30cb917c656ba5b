// `dscore io-bench PATH`: the folder's O_DIRECT write and read bandwidth
// through the Swapper and the nvme plugin over block sizes and queue
// depths, beside the disk probe's limit measured in the same run; prints
// the best "aio" settings and caches them for PATH's device, where "auto"
// in a config's "aio" section finds them (core/config/aio_cache.h).
// DeepSpeed's ds_nvme_tune sweeps for minutes; this takes seconds: a
// bounded number of bytes per point, one file overwritten in place (the
// steady state of swap files), one probe.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "core/base/strings.h"
#include "core/checkpoint/consolidate.h"
#include "core/cli/commands.h"
#include "core/cli/options.h"
#include "core/config/aio_cache.h"
#include "core/offload/disk_probe.h"
#include "core/offload/swap_bandwidth.h"
#include "core/plugin_host/host_context.h"

namespace dscore::cli {
namespace {

namespace fs = std::filesystem;
using config::AioConfig;

struct Point {
  AioConfig settings;
  offload::SwapBandwidth measured;
  double score() const { return measured.read_gbps() + measured.write_gbps(); }
};

struct Sweep {
  std::vector<uint64_t> block_sizes;
  std::vector<int64_t> queue_depths;
  uint64_t min_bytes = 128ull << 20;  // per point
  uint64_t max_bytes = 512ull << 20;  // per point
  uint64_t probe_bytes = 1ull << 30;
};

// Bytes per point: enough for 4 full queues, within [min, max].
uint64_t point_bytes(const Sweep& sweep, const AioConfig& s) {
  const uint64_t four_queues = 4 * static_cast<uint64_t>(s.block_size * s.queue_depth);
  uint64_t bytes = std::min(sweep.max_bytes, std::max(sweep.min_bytes, four_queues));
  return (bytes + s.block_size - 1) / s.block_size * s.block_size;
}

Result<std::vector<uint64_t>> parse_size_list(const std::string& text, const char* option) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    Result<uint64_t> v = checkpoint::parse_size(item);
    if (!v.ok() || *v == 0)
      return invalid_argument(std::string("--") + option + ": \"" + item +
                              "\" is not a size (1048576, 1MiB, 128KiB)");
    out.push_back(*v);
  }
  if (out.empty()) return invalid_argument(std::string("--") + option + " is empty");
  return out;
}

std::string size_text(uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// A folder of its own under PATH, removed with what it holds.
class WorkDir {
 public:
  ~WorkDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  Status create(const std::string& parent) {
    std::string name = parent + "/.dscore_io_bench.XXXXXX";
    if (!::mkdtemp(name.data()))
      return io_error("cannot create a folder in " + parent + ": " + std::strerror(errno) +
                      "; give a folder you can write to");
    path_ = name;
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Bench {
 public:
  Bench(std::shared_ptr<plugin_host::PluginRegistry> registry, std::string folder)
      : registry_(std::move(registry)), folder_(std::move(folder)) {
    context_.host = std::make_shared<plugin_host::HostContext>();
  }

  Result<offload::SwapBandwidth> measure(const AioConfig& settings, uint64_t bytes) {
    auto swapper = offload::make_swapper(*registry_, settings, context_);
    if (!swapper.ok()) return swapper.status();
    backend_ = (*swapper)->backend();
    return offload::measure_swap(**swapper, folder_ + "/swap", bytes);
  }
  const std::string& backend() const { return backend_; }

 private:
  std::shared_ptr<plugin_host::PluginRegistry> registry_;
  std::string folder_;
  plugin_host::InstanceContext context_;
  std::string backend_;
};

void print_row(const Point& p) {
  std::printf(
      "  %6s %5lld %6lld %6s %6s %8.2f %8.2f   %s\n", size_text(p.settings.block_size).c_str(),
      static_cast<long long>(p.settings.queue_depth),
      static_cast<long long>(p.settings.intra_op_parallelism),
      p.settings.single_submit ? "yes" : "no", p.settings.overlap_events ? "yes" : "no",
      p.measured.write_gbps(), p.measured.read_gbps(), format_bytes(p.measured.bytes).c_str());
  std::fflush(stdout);
}

// One line a config can take: {"aio": {...}}.
std::string aio_line(const AioConfig& s) {
  return "{\"aio\": " + json::serialize(config::aio_json(s)) + "}";
}

}  // namespace

int io_bench_command(const std::vector<std::string>& args) {
  po::options_description options("io-bench options");
  std::string path, blocks = "128KiB,256KiB,1MiB,4MiB,8MiB", depths = "4,8,16,32,64";
  std::string min_bytes = "128MiB", max_bytes = "512MiB", probe_bytes = "1GiB";
  bool no_cache = false;
  options.add_options()("path", po::value<std::string>(&path)->required(),
                        "the folder to measure (the run's nvme_path, or a folder on its disk)")(
      "block-sizes", po::value<std::string>(&blocks)->default_value(blocks),
      "aio.block_size values to try, comma-separated")(
      "queue-depths", po::value<std::string>(&depths)->default_value(depths),
      "aio.queue_depth values to try, comma-separated")(
      "bytes-per-point", po::value<std::string>(&min_bytes)->default_value(min_bytes),
      "bytes written and read at each point (at least 4 full queues, up to --max-bytes-per-point)")(
      "max-bytes-per-point", po::value<std::string>(&max_bytes)->default_value(max_bytes),
      "the most bytes one point moves each way")(
      "probe-bytes", po::value<std::string>(&probe_bytes)->default_value(probe_bytes),
      "bytes the reference disk probe writes and reads")(
      "no-cache", po::bool_switch(&no_cache), "print the best settings without caching them");
  po::positional_options_description positional;
  positional.add("path", 1);
  po::variables_map vm;
  int exit_code = kExitOk;
  if (!parse_options(args, options, positional,
                     "usage: dscore io-bench PATH [--block-sizes 128KiB,...] [--queue-depths "
                     "4,...] [--bytes-per-point 128MiB] [--no-cache]",
                     &vm, &exit_code))
    return exit_code;

  Sweep sweep;
  {
    auto b = parse_size_list(blocks, "block-sizes");
    auto q = parse_size_list(depths, "queue-depths");
    auto lo = checkpoint::parse_size(min_bytes);
    auto hi = checkpoint::parse_size(max_bytes);
    auto pr = checkpoint::parse_size(probe_bytes);
    for (const Status& st : {b.status(), q.status(), lo.status(), hi.status(), pr.status()}) {
      if (st.ok()) continue;
      std::fprintf(stderr, "dscore io-bench: %s\n", st.message().c_str());
      return kExitUsage;
    }
    sweep.block_sizes = *b;
    for (uint64_t d : *q) sweep.queue_depths.push_back(static_cast<int64_t>(d));
    sweep.min_bytes = *lo;
    sweep.max_bytes = std::max(*hi, *lo);
    sweep.probe_bytes = *pr;
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    std::fprintf(
        stderr,
        "dscore io-bench: %s is not a folder; give an existing folder on the disk to measure\n",
        path.c_str());
    return kExitUsage;
  }
  const auto started = std::chrono::steady_clock::now();
  Result<config::DeviceId> device = config::device_of(path);
  if (!device.ok()) return report_failure(device.status());
  auto registry = plugin_host::PluginRegistry::open(
      plugin_host::SearchPath::standard({}, fs::current_path().string()));
  if (!registry.ok()) return report_failure(registry.status());
  WorkDir work;
  if (Status st = work.create(path); !st.ok()) return report_failure(st);

  // The limit: the probe before the sweep and again after it, best of
  // each direction (a shared disk's bandwidth drifts over half a minute).
  offload::DiskProbeOptions probe_options;
  probe_options.folder = work.path();
  probe_options.file_bytes = sweep.probe_bytes;
  Result<offload::DiskProbeResult> probe = offload::probe_disk(probe_options);
  if (!probe.ok()) return report_failure(probe.status());
  std::printf("dscore io-bench %s (device %s): O_DIRECT through the Swapper (nvme plugin)\n",
              path.c_str(), device->text().c_str());
  auto print_probe = [&](const char* when, const offload::DiskProbeResult& p) {
    std::printf(
        "  limit, %s: disk probe, %s sequential (overwrite), 8M blocks, queue 32, %s: "
        "write %.2f GB/s, read %.2f GB/s\n",
        when, format_bytes(p.bytes).c_str(), p.backend.c_str(), p.write_gbps(), p.read_gbps());
  };
  print_probe("before", *probe);

  Bench bench(*registry, work.path());
  // Lay the file down once, untimed: every point then overwrites blocks
  // already allocated, as training overwrites its swap files every step.
  uint64_t largest = 0;
  for (uint64_t b : sweep.block_sizes)
    for (int64_t q : sweep.queue_depths)
      largest = std::max(largest, point_bytes(sweep, {static_cast<int64_t>(b), q}));
  {
    AioConfig lay = config::default_aio();
    lay.block_size = 8 << 20;
    lay.queue_depth = 16;
    auto laid =
        bench.measure(lay, (largest + lay.block_size - 1) / lay.block_size * lay.block_size);
    if (!laid.ok()) return report_failure(laid.status());
  }
  std::printf(
      "  backend %s\n   block queue intra single overlap  write GB/s read GB/s  per point\n",
      bench.backend().c_str());
  std::vector<Point> points;
  auto run_point = [&](const AioConfig& s) -> Status {
    auto m = bench.measure(s, point_bytes(sweep, s));
    if (!m.ok()) return m.status();
    points.push_back({s, *m});
    print_row(points.back());
    return Status::Ok();
  };
  for (uint64_t b : sweep.block_sizes)
    for (int64_t q : sweep.queue_depths) {
      AioConfig s = config::default_aio();
      s.block_size = static_cast<int64_t>(b);
      s.queue_depth = q;
      // The thread fallback runs intra_op_parallelism requests at once.
      if (bench.backend() == "threads") s.intra_op_parallelism = std::min<int64_t>(q, 32);
      if (Status st = run_point(s); !st.ok()) return report_failure(st);
    }
  // Then the switches, one at a time, at the best block size and depth.
  auto best_of = [&]() {
    return *std::max_element(points.begin(), points.end(),
                             [](const Point& a, const Point& b) { return a.score() < b.score(); });
  };
  const AioConfig centre = best_of().settings;
  // intra_op_parallelism sizes the nvme plugin's thread fallback only
  // (docs/offload.md#backends): with io_uring it changes nothing.
  const bool threads = bench.backend() == "threads";
  std::vector<AioConfig> variants(2, centre);
  variants[0].single_submit = true;
  variants[1].overlap_events = false;
  if (threads) {
    variants.push_back(centre);
    variants.back().intra_op_parallelism = std::max<int64_t>(1, centre.intra_op_parallelism / 2);
  }
  for (const AioConfig& s : variants)
    if (Status st = run_point(s); !st.ok()) return report_failure(st);
  const Point best = best_of();
  Result<offload::DiskProbeResult> after = offload::probe_disk(probe_options);
  if (!after.ok()) return report_failure(after.status());
  print_probe("after", *after);
  const double limit_write = std::max(probe->write_gbps(), after->write_gbps());
  const double limit_read = std::max(probe->read_gbps(), after->read_gbps());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("best (the highest read + write, as DeepSpeed's ds_nvme_tune picks):\n%s\n",
              aio_line(best.settings).c_str());
  std::printf(
      "  write %.2f GB/s = %.1f%% of the probe's best %.2f; read %.2f GB/s = %.1f%% of the "
      "probe's best %.2f\n",
      best.measured.write_gbps(), 100 * best.measured.write_gbps() / limit_write, limit_write,
      best.measured.read_gbps(), 100 * best.measured.read_gbps() / limit_read, limit_read);
  std::printf("took %.1f s (%zu points)\n", seconds, points.size());
  if (no_cache) return kExitOk;
  config::MeasuredAio cached;
  static_cast<AioConfig&>(cached) = best.settings;
  cached.read_gbps = best.measured.read_gbps();
  cached.write_gbps = best.measured.write_gbps();
  cached.probe_read_gbps = limit_read;
  cached.probe_write_gbps = limit_write;
  fs::path absolute = fs::absolute(path).lexically_normal();
  if (absolute.filename().empty()) absolute = absolute.parent_path();  // "/mnt/nvme/"
  cached.path = absolute.string();
  cached.measured_at = utc_now();
  Result<std::string> file = config::write_aio_cache(*device, cached);
  if (!file.ok()) return report_failure(file.status());
  std::printf("cached for device %s in %s: \"aio\" values of \"auto\" on this device take them\n",
              device->text().c_str(), file->c_str());
  return kExitOk;
}

}  // namespace dscore::cli
