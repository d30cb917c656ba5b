// bench/swap: sustained sequential write and read through the Swapper and
// the nvme plugin, against the disk probe (core/offload/disk_probe.h): the
// same file system's O_DIRECT sequential bandwidth with 8 MiB blocks and 32
// in flight through io_uring, measured in the same run, in the same folder,
// over as many bytes (>= 4 GiB by default). Target: >= 90% of the probe.
//
// Both sides time an overwrite of a file laid down first (the steady state
// of swap files: training rewrites them every step), a write ends with
// fsync, and O_DIRECT keeps the page cache out of the reads. Rounds
// alternate which side goes first, so drift on a shared disk hits both;
// the best of each series is compared, the worst printed beside it.
//
// A third side reads the same bytes as stage 3's gathers read parameters
// on NVMe (offload_param nvme, max_in_cpu 0; core/zero/param_swap.h), run
// by run (--param-run elements, a GPT-2 layer's by default), twice: loaded
// into host memory through staging, as the CPU's gathers do, and read
// straight into an aligned buffer, as a GPU's gathers read into their
// staging ring; both against the probe's read.
//
// The aio settings: what `dscore io-bench` cached for the folder's device,
// else DeepSpeed's defaults; --block-size, --queue-depth, --intra-op
// override them.
//
//   swap [--bytes 4GiB] [--dir PATH] [--repeat K] [--block-size N] [--queue-depth N]
//        [--intra-op N] [--param-run N]
// --dir: where to make the run's folder (default /tmp); removed at the end.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/checkpoint/consolidate.h"
#include "core/config/aio_cache.h"
#include "core/offload/disk_probe.h"
#include "core/offload/swap_bandwidth.h"
#include "core/plugin_host/host_context.h"
#include "core/zero/param_swap.h"
#include "core/zero/plan.h"

namespace {

namespace fs = std::filesystem;
using dscore::Result;
using dscore::Status;
using dscore::config::AioConfig;

struct Options {
  std::string bytes = "4GiB";
  std::string base = "/tmp";
  int repeat = 3;
  int64_t block_size = 0;  // 0: cached or default
  int64_t queue_depth = 0;
  int64_t intra_op = 0;
  int64_t param_run = 7087872;  // elements: a GPT-2 124M layer
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--bytes" && has_value)
      o->bytes = argv[++i];
    else if (a == "--dir" && has_value)
      o->base = argv[++i];
    else if (a == "--repeat" && has_value)
      o->repeat = std::atoi(argv[++i]);
    else if (a == "--block-size" && has_value)
      o->block_size = std::atoll(argv[++i]);
    else if (a == "--queue-depth" && has_value)
      o->queue_depth = std::atoll(argv[++i]);
    else if (a == "--intra-op" && has_value)
      o->intra_op = std::atoll(argv[++i]);
    else if (a == "--param-run" && has_value)
      o->param_run = std::atoll(argv[++i]);
    else
      return false;
  }
  return o->repeat > 0 && o->block_size >= 0 && o->queue_depth >= 0 && o->intra_op >= 0 &&
         o->param_run > 0;
}

// Best and worst seconds of a series.
struct Series {
  double best = 0, worst = 0;
  void add(double s) {
    best = best == 0 ? s : std::min(best, s);
    worst = std::max(worst, s);
  }
};

struct Figures {
  Series probe_write, probe_read, swap_write, swap_read, param_load, param_read_into;
  std::string probe_backend, swap_backend;
};

// The settings and a line saying where they came from.
AioConfig choose_settings(const Options& o, const std::string& folder, std::string* source) {
  AioConfig s = dscore::config::default_aio();  // DeepSpeed's defaults
  *source = "DeepSpeed's defaults (no `dscore io-bench` measurement for this device)";
  Result<dscore::config::DeviceId> device = dscore::config::device_of(folder);
  if (device.ok()) {
    dscore::config::AioCacheLookup cached = dscore::config::read_aio_cache(*device);
    if (!cached.warning.empty())
      std::fprintf(stderr, "swap: warning: %s\n", cached.warning.c_str());
    if (cached.measured) {
      s = *cached.measured;
      *source = "cached by `dscore io-bench " + cached.measured->path + "` on " +
                cached.measured->measured_at + " (" + cached.file + ")";
    }
  }
  if (o.block_size || o.queue_depth || o.intra_op) *source += ", overridden on the command line";
  if (o.block_size) s.block_size = o.block_size;
  if (o.queue_depth) s.queue_depth = o.queue_depth;
  if (o.intra_op) s.intra_op_parallelism = o.intra_op;
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Stage 3's parameter reads: a ParamSwap of bytes / 2 bf16 elements in
// `folder` (removed with its parent when the ParamSwap ends, as a job's
// rank folder is), laid down once, then read run by run: load() into host
// memory (the CPU's gathers), and read_into() an aligned buffer (a GPU's
// gathers, into the staging ring, no copy); the seconds of each.
struct ParamReads {
  double load_seconds = 0, read_into_seconds = 0;
};
Result<ParamReads> time_param_reads(dscore::offload::Swapper& swapper, const fs::path& folder,
                                    uint64_t bytes, int64_t run) {
  const auto local = static_cast<int64_t>(bytes / 2);
  auto swap = dscore::zero::ParamSwap::create(&swapper, folder.string(), local, DSCORE_DTYPE_BF16,
                                              /*max_in_cpu=*/0);
  if (!swap.ok()) return swap.status();
  run = std::min(run, local);
  // Laid down front to back in whole granules, as ShardedZero does.
  const int64_t piece = int64_t{1} << 22;
  std::vector<uint16_t> values(static_cast<size_t>(std::max(run, piece)), 0x3f80);  // 1.0
  for (int64_t a = 0; a < local; a += piece)
    if (Status s = (*swap)->store(a, std::min(piece, local - a), values.data()); !s.ok()) return s;
  if (Status s = (*swap)->flush(); !s.ok()) return s;
  ParamReads r;
  auto start = std::chrono::steady_clock::now();
  for (int64_t a = 0; a < local; a += run)
    if (Status s = (*swap)->load(a, std::min(run, local - a), values.data()); !s.ok()) return s;
  r.load_seconds = seconds_since(start);
  // The most a run's span takes: starting at the last element of a granule.
  const size_t room_bytes = (*swap)->span_bytes(dscore::zero::kTileGranularity - 1, run);
  dscore::CountedBuffer room(
      dscore::counted_alloc(room_bytes, (*swap)->alignment(), DSCORE_MEMORY_HOST,
                            dscore::MemoryUse::kBuffers, "bench room"),
      dscore::CountedFree{DSCORE_MEMORY_HOST});
  if (!room) return dscore::internal_error("cannot allocate the bench's room");
  start = std::chrono::steady_clock::now();
  for (int64_t a = 0; a < local; a += run) {
    Result<const void*> at = (*swap)->read_into(a, std::min(run, local - a), room.get());
    if (!at.ok()) return at.status();
  }
  r.read_into_seconds = seconds_since(start);
  return r;
}

Status run(const Options& o, const fs::path& work, uint64_t bytes, Figures* f, AioConfig* used,
           std::string* source) {
  *used = choose_settings(o, work.string(), source);
  auto registry = dscore::plugin_host::PluginRegistry::open(
      dscore::plugin_host::SearchPath::standard({}, fs::current_path().string()));
  if (!registry.ok()) return registry.status();
  dscore::plugin_host::InstanceContext context;
  context.host = std::make_shared<dscore::plugin_host::HostContext>();

  dscore::offload::DiskProbeOptions probe;
  probe.folder = work.string();
  probe.file_bytes = bytes;
  for (int round = 0; round < o.repeat; ++round) {
    for (int side = 0; side < 3; ++side) {
      if (side == 2) {
        auto swapper = dscore::offload::make_swapper(**registry, *used, context);
        if (!swapper.ok()) return swapper.status();
        Result<ParamReads> reads =
            time_param_reads(**swapper, work / "params" / "rank0", bytes, o.param_run);
        if (!reads.ok()) return reads.status();
        f->param_load.add(reads->load_seconds);
        f->param_read_into.add(reads->read_into_seconds);
      } else if ((side == 0) == (round % 2 == 0)) {
        Result<dscore::offload::DiskProbeResult> p = dscore::offload::probe_disk(probe);
        if (!p.ok()) return p.status();
        f->probe_write.add(p->write_seconds);
        f->probe_read.add(p->read_seconds);
        f->probe_backend = p->backend;
      } else {
        auto swapper = dscore::offload::make_swapper(**registry, *used, context);
        if (!swapper.ok()) return swapper.status();
        f->swap_backend = (*swapper)->backend();
        auto m = dscore::offload::measure_swap(**swapper, (work / "swap").string(), bytes,
                                               /*overwrite=*/true);
        if (!m.ok()) return m.status();
        f->swap_write.add(m->write_seconds);
        f->swap_read.add(m->read_seconds);
        ::unlink((work / "swap").c_str());  // each round lays its file down anew
      }
    }
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: swap [--bytes 4GiB] [--dir PATH] [--repeat K] [--block-size N] "
                 "[--queue-depth N] [--intra-op N] [--param-run N]\n");
    return 2;
  }
  Result<uint64_t> parsed = dscore::checkpoint::parse_size(o.bytes);
  if (!parsed.ok() || *parsed < (8u << 20)) {
    std::fprintf(stderr, "swap: --bytes %s: give a size of at least 8MiB (4GiB, 512MiB)\n",
                 o.bytes.c_str());
    return 2;
  }
  const uint64_t bytes =
      (*parsed + (8u << 20) - 1) / (8u << 20) * (8u << 20);  // whole probe blocks
  std::string pattern = o.base + "/swap.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "swap: cannot make a folder in %s: %s\n", o.base.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const fs::path work = pattern;
  Figures f;
  AioConfig used;
  std::string source;
  Status status = Status::Ok();
  try {
    status = run(o, work, bytes, &f, &used, &source);
  } catch (const std::exception& e) {  // std::filesystem errors
    status = dscore::internal_error(e.what());
  }
  std::error_code ignored;
  fs::remove_all(work, ignored);
  if (!status.ok()) {
    std::fprintf(stderr, "swap: %s\n", status.message().c_str());
    return 1;
  }
  const Result<dscore::config::DeviceId> device = dscore::config::device_of(o.base);
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf(
      "swap: %.3f GB (%.2f GiB) through the Swapper (nvme plugin, %s) in %s (device %s); "
      "%d round(s), best (worst) of each\n",
      gb, bytes / double(1ull << 30), f.swap_backend.c_str(), work.c_str(),
      device.ok() ? device->text().c_str() : "?", o.repeat);
  std::printf(
      "  aio: block_size %lld, queue_depth %lld, intra_op_parallelism %lld, single_submit "
      "%s, overlap_events %s\n    %s\n",
      static_cast<long long>(used.block_size), static_cast<long long>(used.queue_depth),
      static_cast<long long>(used.intra_op_parallelism), used.single_submit ? "true" : "false",
      used.overlap_events ? "true" : "false", source.c_str());
  auto line = [&](const char* what, const Series& s, const Series* limit, const char* limit_name) {
    std::printf("  %-38s %7.3f s (%7.3f)  %5.2f GB/s", what, s.best, s.worst, gb / s.best);
    if (limit)
      std::printf("  %5.1f%% of %s (target >= 90%%)", 100 * limit->best / s.best, limit_name);
    std::printf("\n");
  };
  const std::string probe_name = "disk probe write (8M x 32, " + f.probe_backend + ")";
  const std::string probe_read = "disk probe read (8M x 32, " + f.probe_backend + ")";
  line(probe_name.c_str(), f.probe_write, nullptr, nullptr);
  line("Swapper write (+ fsync)", f.swap_write, &f.probe_write, "disk write");
  line(probe_read.c_str(), f.probe_read, nullptr, nullptr);
  line("Swapper read", f.swap_read, &f.probe_read, "disk read");
  const std::string runs = " (runs of " + std::to_string(o.param_run) + " bf16)";
  line(("parameter loads" + runs).c_str(), f.param_load, &f.probe_read, "disk read");
  line(("parameter reads into a ring" + runs).c_str(), f.param_read_into, &f.probe_read,
       "disk read");
  return 0;
}
