// The CPU emulation of CUDA (include/cuda_emulation.h): the fiber scheduler,
// barriers, shuffles, and the runtime API calls the emulated tests use
// (memory, copies, launch errors), defined here in place of cudart's.
#include "cuda_emulation.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define DSCORE_EMULATION_ASAN 1
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace dscore::cuda_emulation {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kSharedBytes = 232448;          // Hopper's largest dynamic shared memory per block
constexpr size_t kDefaultSharedBytes = 48 << 10;  // without cudaFuncSetAttribute

enum class State { kReady, kAtWarpBarrier, kAtBlockBarrier, kDone };

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  State state = State::kReady;
  void* fake_stack = nullptr;  // ASan's, while the fiber is switched out
};

// The block being run (one at a time, on the launching thread).
struct Block {
  std::vector<Fiber> fibers;
  ucontext_t main;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
  int current = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> exchange;
  alignas(128) unsigned char shared[kSharedBytes];
};

Schedule g_schedule = Schedule::kAscending;
Block* g_block = nullptr;
cudaError_t g_last_error = cudaSuccess;
std::map<const void*, int> g_shared_limits;  // cudaFuncAttributeMaxDynamicSharedMemorySize

void set_coordinates(int thread) {
  threadIdx = make_uint3(static_cast<unsigned>(thread), 0, 0);
}

void switch_to(Fiber& fiber) {
#ifdef DSCORE_EMULATION_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, fiber.stack.get(), kStackBytes);
#endif
  swapcontext(&g_block->main, &fiber.context);
#ifdef DSCORE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// From the running fiber back to the scheduler.
void yield(State state) {
  Fiber& fiber = g_block->fibers[static_cast<size_t>(g_block->current)];
  fiber.state = state;
#ifdef DSCORE_EMULATION_ASAN
  __sanitizer_start_switch_fiber(state == State::kDone ? nullptr : &fiber.fake_stack,
                                 g_block->main_stack_bottom, g_block->main_stack_size);
#endif
  swapcontext(&fiber.context, &g_block->main);
#ifdef DSCORE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fiber.fake_stack, &g_block->main_stack_bottom,
                                  &g_block->main_stack_size);
#endif
}

void fiber_entry() {
#ifdef DSCORE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_block->main_stack_bottom, &g_block->main_stack_size);
#endif
  (*g_block->body)();
  yield(State::kDone);  // never resumed
}

std::string describe(const Block& block) {
  std::string text;
  for (size_t t = 0; t < block.fibers.size(); ++t) {
    const State s = block.fibers[t].state;
    text += " thread " + std::to_string(t) +
            (s == State::kDone            ? " exited;"
             : s == State::kAtWarpBarrier ? " at a warp barrier;"
                                          : " at __syncthreads;");
    if (text.size() > 600) return text + " ...";
  }
  return text;
}

// Opens the barriers every thread they name has reached; false when none.
bool open_barriers(Block& block) {
  const size_t threads = block.fibers.size();
  size_t at_block = 0;
  for (const Fiber& f : block.fibers) at_block += f.state == State::kAtBlockBarrier;
  if (at_block == threads) {
    for (Fiber& f : block.fibers) f.state = State::kReady;
    return true;
  }
  bool opened = false;
  for (size_t w = 0; w < threads / 32; ++w) {
    bool all = true;
    for (size_t l = 0; l < 32; ++l) all = all && block.fibers[w * 32 + l].state == State::kAtWarpBarrier;
    if (!all) continue;
    for (size_t l = 0; l < 32; ++l) block.fibers[w * 32 + l].state = State::kReady;
    opened = true;
  }
  return opened;
}

void run_block(Block& block, int threads) {
  for (int t = 0; t < threads; ++t) {
    Fiber& f = block.fibers[static_cast<size_t>(t)];
    f.state = State::kReady;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_entry, 0);
  }
  std::memset(block.shared, 0xff, sizeof(block.shared));
  for (;;) {
    for (int i = 0; i < threads; ++i) {
      const int t = g_schedule == Schedule::kAscending ? i : threads - 1 - i;
      Fiber& f = block.fibers[static_cast<size_t>(t)];
      if (f.state != State::kReady) continue;
      block.current = t;
      set_coordinates(t);
      switch_to(f);
    }
    size_t done = 0;
    for (const Fiber& f : block.fibers) done += f.state == State::kDone;
    if (done == block.fibers.size()) return;
    if (!open_barriers(block))
      throw std::runtime_error("CUDA emulation: a barrier not every thread reaches, block (" +
                               std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) +
                               ", " + std::to_string(blockIdx.z) + "):" + describe(block));
  }
}

}  // namespace

void set_schedule(Schedule schedule) { g_schedule = schedule; }

int lane() { return static_cast<int>(threadIdx.x % 32); }

unsigned char* dynamic_shared_memory() { return g_block->shared; }

uint64_t exchange(uint64_t value, int source) {
  const size_t warp_base = threadIdx.x / 32 * 32;
  g_block->exchange[threadIdx.x] = value;
  __syncwarp();
  const uint64_t got = g_block->exchange[warp_base + static_cast<size_t>(source % 32)];
  __syncwarp();
  return got;
}

void fail(const char* message) {
  std::fprintf(stderr, "CUDA emulation: %s (block %u, thread %u)\n", message, blockIdx.x,
               threadIdx.x);
  std::abort();
}

void run_grid(const void* kernel, const LaunchConfig& config, const std::function<void()>& body) {
  const unsigned threads = config.block.x;
  const auto limit = g_shared_limits.find(kernel);
  const size_t shared_limit =
      limit == g_shared_limits.end() ? kDefaultSharedBytes : static_cast<size_t>(limit->second);
  if (config.block.y != 1 || config.block.z != 1 || threads == 0 || threads > 1024 ||
      threads % 32 != 0) {
    g_last_error = cudaErrorInvalidConfiguration;  // (the emulation runs whole warps only)
    return;
  }
  if (config.shared_bytes > shared_limit) {
    g_last_error = cudaErrorInvalidValue;
    return;
  }
  if (config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  auto block = std::make_unique<Block>();
  block->fibers.resize(threads);
  for (Fiber& f : block->fibers) f.stack = std::make_unique<char[]>(kStackBytes);
  block->exchange.assign(threads, 0);
  block->body = &body;
  g_block = block.get();
  gridDim = config.grid;
  blockDim = config.block;
  try {
    for (unsigned z = 0; z < config.grid.z; ++z)
      for (unsigned y = 0; y < config.grid.y; ++y)
        for (unsigned x = 0; x < config.grid.x; ++x) {
          blockIdx = make_uint3(x, y, z);
          run_block(*block, static_cast<int>(threads));
        }
  } catch (...) {
    g_block = nullptr;
    throw;
  }
  g_block = nullptr;
}

}  // namespace dscore::cuda_emulation

using dscore::cuda_emulation::State;

void __syncthreads() { dscore::cuda_emulation::yield(State::kAtBlockBarrier); }

void __syncwarp(unsigned mask) {
  if (mask != 0xffffffffu) dscore::cuda_emulation::fail("__syncwarp: only full warps are emulated");
  dscore::cuda_emulation::yield(State::kAtWarpBarrier);
}

// The runtime API the emulated tests call: device memory is host memory.
extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = dscore::cuda_emulation::g_last_error;
  dscore::cuda_emulation::g_last_error = cudaSuccess;
  return e;
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "an error of the CUDA emulation";
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr,
                                           int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > dscore::cuda_emulation::kSharedBytes)
    return cudaErrorInvalidValue;
  dscore::cuda_emulation::g_shared_limits[func] = value;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t size) {
  *ptr = std::aligned_alloc(256, (size + 255) / 256 * 256 + 256);
  return *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind) {
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t count) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

}  // extern "C"
