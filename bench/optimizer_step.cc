// bench/optimizer_step: fp32 Adam on CPU at the memory-bandwidth limit.
// Loads the "adam" plugin through the plugin host exactly as the engine does
// (dscore::prepare_text -> plugin_host::OptimizerInstance), runs steps over
// one flat tensor of N parameters (default 100M), and prints parameters per
// second and the effective bandwidth (28 bytes per parameter: read p, g, m,
// v; write p, m, v) beside two memory passes measured in the same run with
// the same TBB thread count: an Adam-shaped pass over the same four buffers
// (read p, g, m, v; write p, m, v: the same 28 bytes per parameter, one add
// each), which is the step's memory limit, and a STREAM-style triad (a = b +
// s*c, 12 bytes per element, write-allocate not counted, as STREAM). Adam
// above the triad is normal where a few cores cannot saturate memory with
// two read streams. Rounds alternate the passes and Adam so a busy machine
// hurts all alike; the best round of each is reported.
//
// `--grad bf16` gives the step a bf16 gradient and a bf16 parameter copy to
// write (mixed precision: 28 bytes per parameter again; the Adam-shaped pass
// stays fp32, the same bytes in one stream fewer). The kernel the plugin
// chose (AVX-512, AVX2 or scalar) is read from its log line and printed;
// DSCORE_CPU_ISA=avx2|scalar lowers it, to compare the kernels.
//
//   optimizer_step [--params N] [--steps S] [--rounds R] [--threads T] [--grad fp32|bf16]
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/logging.h"
#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t params = 100'000'000;
  int steps = 5;
  int rounds = 3;
  int threads = 0;    // 0 = TBB's default (every core)
  bool bf16 = false;  // bf16 gradient and parameter copy
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--params" && has_value)
      o->params = std::atoll(argv[++i]);
    else if (a == "--steps" && has_value)
      o->steps = std::atoi(argv[++i]);
    else if (a == "--rounds" && has_value)
      o->rounds = std::atoi(argv[++i]);
    else if (a == "--threads" && has_value)
      o->threads = std::atoi(argv[++i]);
    else if (a == "--grad" && has_value &&
             (argv[i + 1] == std::string("fp32") || argv[i + 1] == std::string("bf16")))
      o->bf16 = argv[++i] == std::string("bf16");
    else
      return false;
  }
  return o->params > 0 && o->steps > 0 && o->rounds > 0 && o->threads >= 0;
}

// A buffer of n floats, 64-byte aligned and started `stagger` cache lines
// into its first page, so the streams of one loop do not share 4 KiB page
// offsets (4K aliasing slows loads behind stores); first touched in
// parallel, so pages land near the threads that use them.
struct Buffer {
  void* base = nullptr;
  float* data = nullptr;
  Buffer(int64_t n, float value, int stagger) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float) + 4096;
    base = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (base == nullptr) {
      std::fprintf(stderr, "optimizer_step: out of memory (%zu bytes)\n", bytes);
      std::exit(1);
    }
    data = reinterpret_cast<float*>(static_cast<char*>(base) + 64 * 17 * stagger % 4096);
    float* p = data;
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1 << 16),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        for (int64_t i = r.begin(); i < r.end(); ++i) p[i] = value;
                      });
  }
  ~Buffer() { std::free(base); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* get() const { return data; }
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// STREAM triad: a = b + s * c.
double triad_seconds(float* a, const float* b, const float* c, int64_t n) {
  const float s = 3.0f;
  const auto start = Clock::now();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1 << 15),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + s * c[i];
                    });
  return seconds_since(start);
}

// The Adam step's memory traffic with no arithmetic to speak of: the same
// buffers, chunks and 28 bytes per parameter (p, m, v are read before being
// written, so no write-allocate reads are hidden in it).
double adam_shaped_seconds(float* p, const float* g, float* m, float* v, int64_t n) {
  const auto start = Clock::now();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1 << 15),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      // Distinct buffers: restrict lets the loop vectorise.
                      float* __restrict pp = p;
                      const float* __restrict gg = g;
                      float* __restrict mm = m;
                      float* __restrict vv = v;
                      for (int64_t i = r.begin(); i < r.end(); ++i) {
                        const float pi = pp[i], gi = gg[i], mi = mm[i], vi = vv[i];
                        pp[i] = pi + gi;
                        mm[i] = mi + vi;
                        vv[i] = vi + gi;
                      }
                    });
  return seconds_since(start);
}

dscore_tensor view(void* data, const int64_t* shape, const char* name,
                   dscore_dtype dtype = DSCORE_DTYPE_F32) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device_type = DSCORE_DEVICE_CPU;
  t.ndim = 1;
  t.shape = shape;
  t.numel = shape[0];
  t.name = name;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: optimizer_step [--params N] [--steps S] [--rounds R] [--threads T] "
                 "[--grad fp32|bf16]\n");
    return 2;
  }
  const int threads = o.threads > 0 ? o.threads : tbb::info::default_concurrency();
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);

  // The optimizer, the way the engine gets it: config -> registry -> schema
  // validation -> create through the ABI.
  const char* config = R"({"train_batch_size": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "weight_decay": 0.01}}})";
  dscore::InitializeOptions init = dscore::options_with_environment();
  init.own_model = true;
  auto setup = dscore::prepare_text(config, "optimizer_step", ".", init);
  if (!setup.ok() || !setup->loaded.ok() || !setup->selection.optimizer) {
    std::fprintf(stderr, "optimizer_step: %s\n",
                 setup.ok() ? dscore::format_config_errors(setup->loaded).c_str()
                            : setup.status().message().c_str());
    return 1;
  }
  // The plugin logs the kernel CPU tensors get when it is created; keep
  // that line (and print every line as usual).
  std::string kernel = "unknown (no log line from the plugin)";
  dscore::set_log_formatter([&kernel](dscore::LogLevel, int, std::string_view message) {
    // "adam: CPU tensors use the avx512 kernel[ (DSCORE_CPU_ISA lowered ...)]"
    const std::string_view tag = "adam: CPU tensors use the ";
    if (message.substr(0, tag.size()) == tag) {
      kernel = std::string(message.substr(tag.size()));
      const size_t word = kernel.find(" kernel");
      if (word != std::string::npos) kernel.erase(word, 7);
    }
    return std::string(message);
  });
  auto optimizer = dscore::plugin_host::OptimizerInstance::create(
      *setup->selection.optimizer->info, setup->selection.optimizer->params, {});
  dscore::set_log_formatter({});
  if (!optimizer.ok()) {
    std::fprintf(stderr, "optimizer_step: %s\n", optimizer.status().message().c_str());
    return 1;
  }

  const int64_t n = o.params;
  // With --grad bf16, g's first 2n bytes hold the bf16 gradient (0x3c24 =
  // 0.01) and p16 receives the parameter copy; g stays n floats for the triad.
  Buffer p(n, 0.5f, 0), g(n, 0.01f, 1), m(n, 0.0f, 2), v(n, 0.0f, 3),
      p16(o.bf16 ? n / 2 + 1 : 1, 0.0f, 4);
  if (o.bf16) {
    auto* g16 = reinterpret_cast<uint16_t*>(g.get());
    for (int64_t i = 0; i < n; ++i) g16[i] = 0x3c24;
  }
  const dscore_dtype grad_dtype = o.bf16 ? DSCORE_DTYPE_BF16 : DSCORE_DTYPE_F32;
  const int64_t shape[1] = {n};
  dscore_tensor pt = view(p.get(), shape, "p"), gt = view(g.get(), shape, "g", grad_dtype),
                mt = view(m.get(), shape, "exp_avg"), vt = view(v.get(), shape, "exp_avg_sq"),
                p16t = view(p16.get(), shape, "p16", DSCORE_DTYPE_BF16);
  dscore_tensor* params[] = {&pt};
  dscore_tensor* params_16bit[] = {&p16t};
  const dscore_tensor* grads[] = {&gt};
  dscore_tensor* states[] = {&mt, &vt};
  int64_t step = 0;
  auto adam_seconds = [&] {
    dscore_optimizer_hparams h{};
    h.struct_size = sizeof h;
    h.lr = 1e-3;
    h.weight_decay_multiplier = 1;
    h.step = ++step;
    h.grad_scale = 1;
    dscore_optimizer_step_args a{};
    a.struct_size = sizeof a;
    a.hparams = &h;
    a.tensor_count = 1;
    a.params = params;
    a.grads = grads;
    a.slot_count = 2;
    a.states = states;
    if (o.bf16) a.params_16bit = params_16bit;
    const auto start = Clock::now();
    dscore::Status st = (*optimizer)->step(a);
    const double s = seconds_since(start);
    if (!st.ok()) {
      std::fprintf(stderr, "optimizer_step: %s\n", st.message().c_str());
      std::exit(1);
    }
    return s;
  };

  // The triad reuses three of Adam's buffers (exp_avg = g + s * exp_avg_sq;
  // Adam accepts any exp_avg) so the run needs 16 bytes per parameter (18
  // with --grad bf16; the triad then reads g's bf16 pairs as floats, about
  // 0.01 each, and leaves them as they are).
  adam_seconds();  // warm-up: page faults, TBB threads
  triad_seconds(m.get(), g.get(), v.get(), n);
  adam_shaped_seconds(p.get(), g.get(), m.get(), v.get(), n);
  double best_triad = 1e30, best_shaped = 1e30, best_adam = 1e30;
  for (int r = 0; r < o.rounds; ++r) {
    for (int s = 0; s < o.steps; ++s)
      best_triad = std::min(best_triad, triad_seconds(m.get(), g.get(), v.get(), n));
    for (int s = 0; s < o.steps; ++s)
      best_shaped =
          std::min(best_shaped, adam_shaped_seconds(p.get(), g.get(), m.get(), v.get(), n));
    for (int s = 0; s < o.steps; ++s) best_adam = std::min(best_adam, adam_seconds());
  }

  const double triad_gbs = 12.0 * static_cast<double>(n) / best_triad / 1e9;
  const double shaped_gbs = 28.0 * static_cast<double>(n) / best_shaped / 1e9;
  const double adam_gbs = 28.0 * static_cast<double>(n) / best_adam / 1e9;
  std::printf(
      "optimizer_step: fp32 Adam, %s gradient%s (plugin %s) over %lld parameters, %d thread(s), "
      "best of %d x %d\n",
      o.bf16 ? "bf16" : "fp32", o.bf16 ? " and bf16 parameter copy" : "",
      (*optimizer)->info().library_path.c_str(), static_cast<long long>(n), threads, o.rounds,
      o.steps);
  std::printf("  cpu: avx512f=%d avx2=%d fma=%d; kernel: %s\n",
              __builtin_cpu_supports("avx512f") ? 1 : 0, __builtin_cpu_supports("avx2") ? 1 : 0,
              __builtin_cpu_supports("fma") ? 1 : 0, kernel.c_str());
  std::printf(
      "  triad (a = b + s*c)   %8.3f ms   %7.2f GB/s (12 B/element, STREAM's count; %.2f GB/s "
      "with the write-allocate read of a)\n",
      best_triad * 1e3, triad_gbs, triad_gbs * 16.0 / 12.0);
  std::printf(
      "  adam-shaped pass      %8.3f ms   %7.2f GB/s (28 B/parameter: read p, g, m, v; write p, "
      "m, v; no arithmetic)\n",
      best_shaped * 1e3, shaped_gbs);
  std::printf(
      "  adam step             %8.3f ms   %7.2f GB/s (28 B/parameter)   %.3g parameters/s\n",
      best_adam * 1e3, adam_gbs, static_cast<double>(n) / best_adam);
  std::printf("  adam / triad bandwidth: %.1f%%\n", 100.0 * adam_gbs / triad_gbs);
  std::printf("  adam / adam-shaped pass: %.1f%% (the step's memory limit; target >= 80%%)\n",
              100.0 * adam_gbs / shaped_gbs);
  return 0;
}
