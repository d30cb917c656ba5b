// bench/gpu/fused_adam: the FusedAdam step on CUDA against the device's copy
// bandwidth, measured in the same run. The optimizer comes the way the
// engine gets it (config "type": "FusedAdam" -> registry -> the adam plugin
// through the ABI); its tensors are views into flat device buffers (p, g,
// exp_avg, exp_avg_sq), laid out as GPT-2 124M's 148 parameter tensors by
// default. Adam moves 28 bytes per parameter (read p, g, m, v; write p, m,
// v in fp32; with --grad bf16: a bf16 gradient and a bf16 parameter copy
// written, again 28); the limit is a cudaMemcpy device-to-device moving as
// many bytes (half read, half written). Rounds alternate copy and Adam, and
// the best step of each is reported. With --torch PYTHON it then runs
// torch_fused_adamw.py (beside this file) on the same tensors' shapes and
// prints torch's fused AdamW step beside dscore's.
//
//   fused_adam [--params N | --layout gpt2] [--grad fp32|bf16] [--steps S] [--rounds R]
//              [--torch PYTHON]
//
// Exits 0 with a message where no CUDA device is present.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/initialize.h"
#include "core/plugin_host/instances.h"

namespace {

struct Options {
  int64_t params = 0;  // 0: the GPT-2 124M layout
  bool bf16 = false;
  int steps = 20;
  int rounds = 3;
  std::string torch_python;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--params" && has_value) {
      o->params = std::atoll(argv[++i]);
      if (o->params <= 0) return false;
    } else if (a == "--layout" && has_value) {
      if (std::string(argv[++i]) != "gpt2") return false;
      o->params = 0;
    } else if (a == "--grad" && has_value) {
      const std::string g = argv[++i];
      if (g != "fp32" && g != "bf16") return false;
      o->bf16 = g == "bf16";
    } else if (a == "--steps" && has_value) {
      o->steps = std::atoi(argv[++i]);
    } else if (a == "--rounds" && has_value) {
      o->rounds = std::atoi(argv[++i]);
    } else if (a == "--torch" && has_value) {
      o->torch_python = argv[++i];
    } else {
      return false;
    }
  }
  return o->steps > 0 && o->rounds > 0;
}

// GPT-2 124M's parameter tensors (n_layer 12, n_embd 768, vocab 50257,
// n_ctx 1024), as the gpt plugin and Hugging Face lay them out.
std::vector<int64_t> gpt2_124m_sizes() {
  const int64_t c = 768, v = 50257, t = 1024;
  std::vector<int64_t> sizes = {v * c, t * c};
  for (int layer = 0; layer < 12; ++layer) {
    const int64_t block[] = {c, c, c * 3 * c, 3 * c, c * c,     c,
                             c, c, c * 4 * c, 4 * c, 4 * c * c, c};
    sizes.insert(sizes.end(), std::begin(block), std::end(block));
  }
  sizes.push_back(c);
  sizes.push_back(c);
  return sizes;
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "fused_adam: %s: %s: %s\n", what, cudaGetErrorName(err),
               cudaGetErrorString(err));
  std::exit(1);
}

// A device buffer, filled with a byte pattern (0x3c: fp32 0.0115, bf16 0.0115).
struct DeviceBuffer {
  void* data = nullptr;
  DeviceBuffer(size_t bytes, int pattern) {
    check(cudaMalloc(&data, bytes), "cudaMalloc");
    check(cudaMemset(data, pattern, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

dscore_tensor view(void* data, dscore_dtype dtype, const int64_t* shape, const char* name) {
  dscore_tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device_type = DSCORE_DEVICE_CUDA;
  t.ndim = 1;
  t.shape = shape;
  t.numel = shape[0];
  t.name = name;
  return t;
}

// Runs the script and returns its step time in ms (its line
// "torch_fused_adamw: step_ms=<x> ..."), or a negative number.
double run_torch(const Options& o) {
  std::string cmd = o.torch_python + " " DSCORE_SOURCE_DIR "/bench/gpu/torch_fused_adamw.py" +
                    " --steps " + std::to_string(o.steps) + " --rounds " +
                    std::to_string(o.rounds) + (o.bf16 ? " --grad bf16" : "");
  if (o.params > 0) cmd += " --params " + std::to_string(o.params);
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return -1;
  double ms = -1;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::fputs(line, stdout);
    const std::string s = line;
    const auto at = s.find("torch_fused_adamw: step_ms=");
    if (at != std::string::npos) ms = std::atof(s.c_str() + at + 27);
  }
  const int status = pclose(pipe);
  return status == 0 ? ms : -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: fused_adam [--params N | --layout gpt2] [--grad fp32|bf16] [--steps S] "
                 "[--rounds R] [--torch PYTHON]\n");
    return 2;
  }
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::printf("fused_adam: no CUDA device (%s); nothing measured\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "cudaGetDeviceCount: 0");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

  const char* config = R"({"train_batch_size": 1,
    "optimizer": {"type": "FusedAdam", "params": {"lr": 0.001, "weight_decay": 0.01}}})";
  dscore::InitializeOptions init = dscore::options_with_environment();
  init.own_model = true;
  auto setup = dscore::prepare_text(config, "fused_adam", ".", init);
  if (!setup.ok() || !setup->loaded.ok() || !setup->selection.optimizer) {
    std::fprintf(stderr, "fused_adam: %s\n",
                 setup.ok() ? dscore::format_config_errors(setup->loaded).c_str()
                            : setup.status().message().c_str());
    return 1;
  }
  auto optimizer = dscore::plugin_host::OptimizerInstance::create(
      *setup->selection.optimizer->info, setup->selection.optimizer->params, {});
  if (!optimizer.ok()) {
    std::fprintf(stderr, "fused_adam: %s\n", optimizer.status().message().c_str());
    return 1;
  }
  if (((*optimizer)->info().capabilities & DSCORE_CAP_CUDA) == 0) {
    std::fprintf(stderr, "fused_adam: %s was built without CUDA\n",
                 (*optimizer)->info().library_path.c_str());
    return 1;
  }

  const std::vector<int64_t> sizes =
      o.params > 0 ? std::vector<int64_t>{o.params} : gpt2_124m_sizes();
  double best_adam = 1e30;
  {  // the device buffers live until the torch comparison below
    int64_t n = 0;
    for (int64_t s : sizes) n += s;
    const dscore_dtype gd = o.bf16 ? DSCORE_DTYPE_BF16 : DSCORE_DTYPE_F32;
    const size_t gsize = o.bf16 ? 2 : 4;
    const size_t bytes32 = static_cast<size_t>(n) * 4;
    DeviceBuffer p(bytes32, 0x3c), g(static_cast<size_t>(n) * gsize, 0x3c), m(bytes32, 0),
        v(bytes32, 0);
    std::unique_ptr<DeviceBuffer> p16;
    if (o.bf16) p16 = std::make_unique<DeviceBuffer>(static_cast<size_t>(n) * 2, 0);
    const double step_bytes = 28.0 * static_cast<double>(n);
    // The copy moves as many bytes: step_bytes / 2 read and as many written.
    const size_t copy_bytes = static_cast<size_t>(step_bytes / 2);
    DeviceBuffer copy_src(copy_bytes, 0x11), copy_dst(copy_bytes, 0);

    // Views: tensor i of each buffer at the same element offset.
    const size_t count = sizes.size();
    std::vector<int64_t> shapes(sizes);
    std::vector<dscore_tensor> pt(count), gt(count), mt(count), vt(count), ot(count);
    std::vector<dscore_tensor*> params(count), states(2 * count), outs(count);
    std::vector<const dscore_tensor*> grads(count);
    int64_t offset = 0;
    for (size_t i = 0; i < count; ++i) {
      pt[i] = view(static_cast<float*>(p.data) + offset, DSCORE_DTYPE_F32, &shapes[i], "p");
      gt[i] = view(static_cast<char*>(g.data) + offset * static_cast<int64_t>(gsize), gd,
                   &shapes[i], "g");
      mt[i] = view(static_cast<float*>(m.data) + offset, DSCORE_DTYPE_F32, &shapes[i], "exp_avg");
      vt[i] =
          view(static_cast<float*>(v.data) + offset, DSCORE_DTYPE_F32, &shapes[i], "exp_avg_sq");
      if (p16)
        ot[i] =
            view(static_cast<uint16_t*>(p16->data) + offset, DSCORE_DTYPE_BF16, &shapes[i], "p16");
      params[i] = &pt[i], grads[i] = &gt[i], states[i] = &mt[i], states[count + i] = &vt[i];
      outs[i] = &ot[i];
      offset += sizes[i];
    }

    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    int64_t step = 0;
    auto adam_seconds = [&] {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      for (int s = 0; s < o.steps; ++s) {
        dscore_optimizer_hparams h{};
        h.struct_size = sizeof h;
        h.lr = 1e-3;
        h.weight_decay_multiplier = 1;
        h.step = ++step;
        h.grad_scale = 1;
        dscore_optimizer_step_args a{};
        a.struct_size = sizeof a;
        a.hparams = &h;
        a.tensor_count = count;
        a.params = params.data();
        a.grads = grads.data();
        a.slot_count = 2;
        a.states = states.data();
        a.params_16bit = p16 ? outs.data() : nullptr;
        a.stream = stream;
        const dscore::Status st = (*optimizer)->step(a);
        if (!st.ok()) {
          std::fprintf(stderr, "fused_adam: %s\n", st.message().c_str());
          std::exit(1);
        }
      }
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      return ms / 1e3 / o.steps;
    };
    auto copy_seconds = [&] {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      for (int s = 0; s < o.steps; ++s)
        check(cudaMemcpyAsync(copy_dst.data, copy_src.data, copy_bytes, cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync");
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      return ms / 1e3 / o.steps;
    };

    adam_seconds();  // warm-up: module load, first-touch of the pages
    copy_seconds();
    double best_copy = 1e30, worst_copy = 0, worst_adam = 0;
    for (int r = 0; r < o.rounds; ++r) {
      const double c = copy_seconds(), a = adam_seconds();
      best_copy = std::min(best_copy, c), worst_copy = std::max(worst_copy, c);
      best_adam = std::min(best_adam, a), worst_adam = std::max(worst_adam, a);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);

    const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / best_copy / 1e9;
    const double adam_gbs = step_bytes / best_adam / 1e9;
    std::printf("fused_adam: FusedAdam (plugin %s) on %s\n",
                (*optimizer)->info().library_path.c_str(), prop.name);
    std::printf(
        "  %s: %zu tensor(s), %lld fp32 parameters, %s gradients%s; best (worst) of %d x %d "
        "steps\n",
        o.params > 0 ? "flat" : "GPT-2 124M layout", count, static_cast<long long>(n),
        o.bf16 ? "bf16" : "fp32", o.bf16 ? " and a bf16 parameter copy" : "", o.rounds, o.steps);
    std::printf(
        "  device copy (cudaMemcpy D2D, %.2f GB)   %8.3f ms (%8.3f)   %7.1f GB/s (read + write)\n",
        static_cast<double>(copy_bytes) / 1e9, best_copy * 1e3, worst_copy * 1e3, copy_gbs);
    std::printf(
        "  FusedAdam step                         %8.3f ms (%8.3f)   %7.1f GB/s (28 B/parameter)   "
        "%.1f%% of copy (target >= 85%%)\n",
        best_adam * 1e3, worst_adam * 1e3, adam_gbs, 100.0 * adam_gbs / copy_gbs);
  }

  if (!o.torch_python.empty()) {  // this run's buffers are freed: torch has the device
    const double torch_ms = run_torch(o);
    if (torch_ms <= 0) {
      std::fprintf(stderr, "fused_adam: the torch comparison did not run (see above)\n");
      return 1;
    }
    std::printf("  torch fused AdamW / dscore FusedAdam step time: %.3f ms / %.3f ms = %.2f\n",
                torch_ms, best_adam * 1e3, torch_ms / (best_adam * 1e3));
  }
  return 0;
}
