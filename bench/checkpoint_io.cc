// bench/checkpoint_io: checkpoint save and load bandwidth against the disk,
// and the memory of `dscore zero-to-fp32`. One rank trains one step of an
// fp32 mlp with Adam (16 bytes per parameter on disk: the model's fp32
// parameters, the fp32 masters, exp_avg and exp_avg_sq; >= 1 GiB by
// default), then per round: Engine::save_checkpoint (fsyncs every file),
// plain write()+fsync of as many bytes to the same folder (the disk's write
// limit) and a cold read() of that file (the read limit), twice, and a cold
// Engine::load_checkpoint (checksums verified, parameters refreshed), whose
// bandwidth counts the bytes it fetched from the disk (/proc/self/io). The
// best of each series is reported. Last, the real CLI converts the
// checkpoint to sharded safetensors and its peak RSS is set beside the
// largest shard it wrote.
//
//   checkpoint_io [--params N] [--dir PATH] [--repeat K] [--max-shard-size 256MB]
// --dir: where to make the run's folder (default /tmp); removed at the end.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/initialize.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkBytes = size_t{8} << 20;  // the disk probes' read()/write() size
constexpr const char* kTag = "bench";
constexpr const char* kMeasureChild = "--measure-child";  // internal: see measure_child()

struct Options {
  int64_t params = 70'000'000;
  std::string base = "/tmp";  // the folder made for the run goes inside
  int repeat = 3;
  std::string max_shard = "256MB";
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--params" && has_value)
      o->params = std::atoll(argv[++i]);
    else if (a == "--dir" && has_value)
      o->base = argv[++i];
    else if (a == "--repeat" && has_value)
      o->repeat = std::atoi(argv[++i]);
    else if (a == "--max-shard-size" && has_value)
      o->max_shard = argv[++i];
    else
      return false;
  }
  return o->params > 0 && o->repeat > 0;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

dscore::Status errno_error(const std::string& what, const std::string& path) {
  return dscore::io_error(what + " " + path + ": " + std::strerror(errno));
}

// Flush a file and evict it from the page cache, so the next read comes
// from the disk. DONTNEED drops only clean pages, hence the fsync first.
dscore::Status drop_from_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open", path);
  const bool ok = ::fsync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok ? dscore::Status::Ok() : errno_error("cannot evict from the page cache", path);
}

std::vector<fs::path> files_under(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(folder))
    if (e.is_regular_file()) files.push_back(e.path());
  return files;
}

uint64_t bytes_under(const fs::path& folder) {
  uint64_t total = 0;
  for (const fs::path& f : files_under(folder)) total += fs::file_size(f);
  return total;
}

// The disk's write limit: `bytes` in 8 MiB write()s of touched memory, then
// fsync, timed from open to close.
dscore::Result<double> disk_write_seconds(const std::string& path, uint64_t bytes) {
  std::vector<char> chunk(kChunkBytes);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 131 + 7);
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("cannot create", path);
  for (uint64_t done = 0, index = 0; done < bytes; ++index) {
    std::memcpy(chunk.data(), &index, sizeof index);  // no two chunks alike
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - done));
    const ssize_t w = ::write(fd, chunk.data(), n);
    if (w <= 0) {
      ::close(fd);
      return errno_error("cannot write", path);
    }
    done += static_cast<uint64_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return errno_error("cannot fsync", path);
  return seconds_since(start);
}

// The disk's read limit: the whole file, out of the page cache, in 8 MiB
// read()s.
dscore::Result<double> disk_read_seconds(const std::string& path) {
  DSCORE_RETURN_IF_ERROR(drop_from_cache(path));
  std::vector<char> chunk(kChunkBytes, 0);
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open", path);
  ssize_t r;
  while ((r = ::read(fd, chunk.data(), chunk.size())) > 0) {
  }
  ::close(fd);
  if (r < 0) return errno_error("cannot read", path);
  return seconds_since(start);
}

// An mlp of equal-width linear layers (at most 2048 wide) with about
// `params` parameters.
std::string config_text(int64_t params, int64_t* width, int64_t* layers) {
  *width =
      std::clamp<int64_t>(static_cast<int64_t>(std::sqrt(static_cast<double>(params))), 1, 2048);
  *layers = std::max<int64_t>(
      1, std::llround(static_cast<double>(params) / static_cast<double>(*width * (*width + 1))));
  char text[1024];
  std::snprintf(text, sizeof text,
                R"({"plugins": {"paths": ["%s"]}, "train_batch_size": 1,
                    "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
                    "model": {"type": "mlp", "input_dim": %lld, "hidden_dim": %lld, "output_dim": %lld,
                              "n_hidden_layers": %lld},
                    "zero_optimization": {"stage": 1}})",
                DSCORE_BUILD_PLUGIN_DIR, static_cast<long long>(*width),
                static_cast<long long>(*width), static_cast<long long>(*width),
                static_cast<long long>(*layers - 1));
  return text;
}

dscore::Result<std::unique_ptr<dscore::Engine>> trained_engine(const std::string& config) {
  dscore::InitializeOptions trusted = dscore::options_with_environment();
  trusted.trust_config_plugin_paths = true;  // the build's plugin folder, named here
  auto setup = dscore::prepare_text(config, "checkpoint_io.json", ".", trusted);
  if (!setup.ok()) return setup.status();
  if (!setup->loaded.ok())
    return dscore::invalid_argument(dscore::format_config_errors(setup->loaded));
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<dscore::Engine> engine,
                          dscore::build_engine(*setup, nullptr));
  // One step, so the optimizer state is not all zeros.
  const auto& cfg = engine->config();
  DSCORE_ASSIGN_OR_RETURN(auto source, dscore::data::make_batch_source(cfg, engine->model()));
  dscore::data::DistributedSampler sampler(cfg.batch, 1, 0);
  dscore::data::HostBatch batch(engine->model().description(),
                                cfg.batch.train_micro_batch_size_per_gpu);
  DSCORE_RETURN_IF_ERROR(source->fill(sampler.micro_batch(0, 0), &batch));
  DSCORE_RETURN_IF_ERROR(engine->forward_backward(batch.view()).status());
  DSCORE_RETURN_IF_ERROR(engine->step());
  return engine;
}

// Start `argv` with its stdout on `stdout_fd` (-1: /dev/null).
dscore::Result<pid_t> spawn(const std::vector<std::string>& argv, int stdout_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  else
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return dscore::io_error("cannot start " + argv[0] + ": " + std::strerror(err));
  return pid;
}

// The child mode: run argv[2...] with stdout on /dev/null and print "exit
// status, peak RSS in KiB, seconds". A separate small process because
// exec() carries the old address space's RSS high-water mark into the new
// program's ru_maxrss: spawned straight from the bench, the CLI would
// report the engine's gigabytes.
int measure_child(int argc, char** argv) {
  auto pid = spawn(std::vector<std::string>(argv + 2, argv + argc), -1);
  if (!pid.ok()) {
    std::fprintf(stderr, "checkpoint_io: %s\n", pid.status().message().c_str());
    return 1;
  }
  const auto start = Clock::now();
  int status = 0;
  rusage usage{};
  if (::wait4(*pid, &status, 0, &usage) != *pid) return 1;
  const double seconds = seconds_since(start);
  std::printf("%d %ld %.6f\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128, usage.ru_maxrss,
              seconds);
  return 0;
}

struct ChildFigures {
  long peak_rss_kib = 0;
  double seconds = 0;
};

dscore::Result<ChildFigures> run_measured(const std::vector<std::string>& command) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return errno_error("cannot make a pipe", "for the child");
  std::vector<std::string> argv = {fs::read_symlink("/proc/self/exe").string(), kMeasureChild};
  argv.insert(argv.end(), command.begin(), command.end());
  auto pid = spawn(argv, out[1]);
  ::close(out[1]);
  std::string text;
  char buffer[256];
  ssize_t n;
  while ((n = ::read(out[0], buffer, sizeof buffer)) > 0)
    text.append(buffer, static_cast<size_t>(n));
  ::close(out[0]);
  if (!pid.ok()) return pid.status();
  int status = 0;
  ::waitpid(*pid, &status, 0);
  int exit_code = -1;
  ChildFigures f;
  if (std::sscanf(text.c_str(), "%d %ld %lf", &exit_code, &f.peak_rss_kib, &f.seconds) != 3 ||
      exit_code != 0)
    return dscore::internal_error(command[0] + " " + command[1] + " failed (exit " +
                                  std::to_string(exit_code) + ")");
  return f;
}

double gb_per_s(uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;
}
double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Bytes this process has had the kernel fetch from storage (page-cache
// misses), from /proc/self/io.
dscore::Result<uint64_t> storage_read_bytes() {
  FILE* f = std::fopen("/proc/self/io", "r");
  if (f == nullptr) return errno_error("cannot open", "/proc/self/io");
  char line[128];
  unsigned long long bytes = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr)
    found = std::sscanf(line, "read_bytes: %llu", &bytes) == 1;
  std::fclose(f);
  if (!found)
    return dscore::internal_error("/proc/self/io has no read_bytes line (no task I/O accounting)");
  return static_cast<uint64_t>(bytes);
}

// The fastest and slowest of a series of timings.
struct Timings {
  double best = 1e30, worst = 0;
  void add(double seconds) {
    best = std::min(best, seconds);
    worst = std::max(worst, seconds);
  }
};

struct IoFigures {
  uint64_t checkpoint_bytes = 0;  // every file of one save
  size_t files = 0;
  Timings save, load, disk_write, disk_read;
  uint64_t load_storage_bytes = 0;  // fetched from storage by the fastest load
};

// K rounds of save, disk probes, load. The disk is a shared virtual one
// whose speed swings from one file to the next, so each round probes it
// kProbesPerRound times; every figure is the best of its series.
dscore::Result<IoFigures> measure_rounds(dscore::Engine& engine, const fs::path& work,
                                         const std::string& dir, int rounds) {
  constexpr int kProbesPerRound = 2;
  const fs::path saved = fs::path(dir) / kTag;
  const std::string probe = (work / "disk_probe").string();
  dscore::SaveCheckpointOptions save;
  save.tag = kTag;
  IoFigures f;
  for (int round = 0; round < rounds; ++round) {
    fs::remove_all(saved);  // a fresh save each round, as with a new tag
    auto start = Clock::now();
    DSCORE_RETURN_IF_ERROR(engine.save_checkpoint(dir, save));
    f.save.add(seconds_since(start));
    f.checkpoint_bytes = bytes_under(saved);
    f.files = files_under(saved).size();

    for (int p = 0; p < kProbesPerRound; ++p) {
      DSCORE_ASSIGN_OR_RETURN(double write_s, disk_write_seconds(probe, f.checkpoint_bytes));
      DSCORE_ASSIGN_OR_RETURN(double read_s, disk_read_seconds(probe));
      fs::remove(probe);
      f.disk_write.add(write_s);
      f.disk_read.add(read_s);
    }

    for (const fs::path& file : files_under(dir))
      DSCORE_RETURN_IF_ERROR(drop_from_cache(file.string()));
    DSCORE_ASSIGN_OR_RETURN(uint64_t read_before, storage_read_bytes());
    start = Clock::now();
    DSCORE_RETURN_IF_ERROR(engine.load_checkpoint(dir).status());
    const double load_s = seconds_since(start);
    DSCORE_ASSIGN_OR_RETURN(uint64_t read_after, storage_read_bytes());
    if (load_s < f.load.best) f.load_storage_bytes = read_after - read_before;
    f.load.add(load_s);
  }
  return f;
}

struct ConvertFigures {
  ChildFigures run, idle;  // zero-to-fp32, and `dscore --version` for the floor
  uint64_t largest_shard = 0, model_bytes = 0;
  size_t shards = 0;
};

// zero-to-fp32 through the real CLI (beside this program in bin/), cold.
dscore::Result<ConvertFigures> measure_convert(const std::string& dir, const std::string& out,
                                               const std::string& max_shard) {
  const std::string dscore = (fs::read_symlink("/proc/self/exe").parent_path() / "dscore").string();
  if (!fs::exists(dscore))
    return dscore::not_found(dscore + " is missing: build the dscore target");
  for (const fs::path& f : files_under(dir)) DSCORE_RETURN_IF_ERROR(drop_from_cache(f.string()));
  ConvertFigures c;
  DSCORE_ASSIGN_OR_RETURN(
      c.run, run_measured({dscore, "zero-to-fp32", dir, out, "--max-shard-size", max_shard}));
  DSCORE_ASSIGN_OR_RETURN(c.idle, run_measured({dscore, "--version"}));
  for (const fs::path& f : files_under(out)) {
    if (f.extension() != ".safetensors") continue;
    c.largest_shard = std::max<uint64_t>(c.largest_shard, fs::file_size(f));
    c.model_bytes += fs::file_size(f);
    ++c.shards;
  }
  if (c.shards == 0)
    return dscore::internal_error("zero-to-fp32 wrote no .safetensors file in " + out);
  return c;
}

dscore::Status run(const Options& o, const fs::path& work) {
  int64_t width = 0, layers = 0;
  const std::string config = config_text(o.params, &width, &layers);
  DSCORE_ASSIGN_OR_RETURN(std::unique_ptr<dscore::Engine> engine, trained_engine(config));
  const std::string dir = (work / "checkpoints").string();
  DSCORE_ASSIGN_OR_RETURN(IoFigures io, measure_rounds(*engine, work, dir, o.repeat));
  DSCORE_ASSIGN_OR_RETURN(ConvertFigures c,
                          measure_convert(dir, (work / "fp32").string(), o.max_shard));

  const uint64_t bytes = io.checkpoint_bytes;
  const double write_gbs = gb_per_s(bytes, io.disk_write.best),
               read_gbs = gb_per_s(bytes, io.disk_read.best);
  const double save_gbs = gb_per_s(bytes, io.save.best);
  const double load_gbs = gb_per_s(io.load_storage_bytes, io.load.best);
  std::printf(
      "checkpoint_io: mlp %lld linear layers of %lld x %lld, %lld fp32 parameters, Adam, ZeRO-1, "
      "1 rank; %d round(s), best (worst) of each\n",
      static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(width),
      static_cast<long long>(engine->layout().total_numel()), o.repeat);
  std::printf("  checkpoint: %.3f GB (%.3f GiB) in %zu files under %s\n",
              static_cast<double>(bytes) / 1e9, static_cast<double>(bytes) / (1 << 30), io.files,
              work.c_str());
  std::printf("  disk write (write + fsync)  %7.3f s (%6.3f)  %5.2f GB/s\n", io.disk_write.best,
              io.disk_write.worst, write_gbs);
  std::printf(
      "  save_checkpoint             %7.3f s (%6.3f)  %5.2f GB/s  %5.1f%% of disk write "
      "(target >= 80%%)\n",
      io.save.best, io.save.worst, save_gbs, 100.0 * save_gbs / write_gbs);
  std::printf("  disk read (cold read())     %7.3f s (%6.3f)  %5.2f GB/s\n", io.disk_read.best,
              io.disk_read.worst, read_gbs);
  std::printf(
      "  load_checkpoint (cold)      %7.3f s (%6.3f)  %5.2f GB/s  %5.1f%% of disk read "
      "(target >= 80%%)\n",
      io.load.best, io.load.worst, load_gbs, 100.0 * load_gbs / read_gbs);
  std::printf(
      "    GB/s of the %.3f GB the load fetched from disk (/proc/self/io); "
      "%.2f GB/s of the whole checkpoint\n",
      static_cast<double>(io.load_storage_bytes) / 1e9, gb_per_s(bytes, io.load.best));
  const uint64_t rss = static_cast<uint64_t>(c.run.peak_rss_kib) << 10;
  std::printf("  zero-to-fp32 --max-shard-size %s (cold): %.3f s, %zu shard(s)\n",
              o.max_shard.c_str(), c.run.seconds, c.shards);
  std::printf(
      "    peak RSS %.1f MiB; largest shard %.1f MiB (RSS %.2fx); model %.1f MiB (RSS %.2fx); "
      "`dscore --version` alone %.1f MiB\n",
      mib(rss), mib(c.largest_shard),
      static_cast<double>(rss) / static_cast<double>(c.largest_shard), mib(c.model_bytes),
      static_cast<double>(rss) / static_cast<double>(c.model_bytes),
      static_cast<double>(c.idle.peak_rss_kib) / 1024.0);
  return dscore::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], kMeasureChild) == 0) return measure_child(argc, argv);
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(
        stderr,
        "usage: checkpoint_io [--params N] [--dir PATH] [--repeat K] [--max-shard-size 256MB]\n");
    return 2;
  }
  std::string pattern = o.base + "/checkpoint_io.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "checkpoint_io: cannot make a folder in %s: %s\n", o.base.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const fs::path work = pattern;
  dscore::Status status = dscore::Status::Ok();
  try {
    status = run(o, work);
  } catch (const std::exception& e) {  // std::filesystem errors
    status = dscore::internal_error(e.what());
  }
  std::error_code ignored;
  fs::remove_all(work, ignored);  // every file this run made
  if (!status.ok()) {
    std::fprintf(stderr, "checkpoint_io: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
