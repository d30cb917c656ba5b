// The CPU emulation of CUDA (include/cuda_emulation.h): the fiber scheduler,
// barriers, shuffles and launches. The runtime API is in runtime_api.cc,
// cuBLAS in cublas.cc.
#include "cuda_emulation.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define DSCORE_EMULATION_ASAN 1
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace dscore::cuda_emulation {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kSharedBytes = kMaxSharedBytes;
constexpr size_t kDefaultSharedBytes = 48 << 10;  // without cudaFuncSetAttribute

enum class State { kReady, kAtWarpBarrier, kAtBlockBarrier, kDone };

#if defined(__x86_64__)
// A switch between stacks without the signal-mask system call of
// swapcontext: the callee-saved registers and the floating-point control
// words are pushed on the old stack, its pointer saved, the new one loaded
// and its registers popped.
struct Context {
  void* sp = nullptr;
};
extern "C" void dscore_emulation_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl dscore_emulation_switch
  .type dscore_emulation_switch, @function
dscore_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dscore_emulation_switch, .-dscore_emulation_switch
)");

void switch_context(Context& from, const Context& to) { dscore_emulation_switch(&from.sp, to.sp); }

// A context that enters `entry` (which never returns) on the stack.
void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* words = reinterpret_cast<uint64_t*>(top);
  words[-1] = 0;                                  // entry's return address: none
  words[-2] = reinterpret_cast<uint64_t>(entry);  // popped by ret
  for (int r = 3; r <= 8; ++r) words[-r] = 0;     // rbp, rbx, r12-r15
  uint32_t control[2] = {0, 0};                   // this thread's mxcsr and x87 control word
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(&words[-9], control, 8);
  c.sp = &words[-9];
}
#else
struct Context {
  ucontext_t uc;
};

void switch_context(Context& from, const Context& to) { swapcontext(&from.uc, &to.uc); }

void start_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
  Context context;
  std::unique_ptr<char[]> stack;
  State state = State::kReady;
  void* fake_stack = nullptr;  // ASan's, while the fiber is switched out
  size_t products = 0;         // tile products since the fiber's last barrier
};

// A tile product a warp computed: the n-th since a barrier of `generation`.
struct Product {
  uint64_t generation = 0;
  std::vector<unsigned char> tiles, result;
};

struct Warp {
  uint64_t generation = 1;  // advances each time a barrier of the warp opens
  std::vector<Product> products;
};

// The block being run (one at a time, on the launching thread).
struct Block {
  std::vector<Fiber> fibers;  // the first `threads` run
  size_t threads = 0;
  Context main;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
  int current = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> exchange;
  std::vector<Warp> warps;
  alignas(128) unsigned char shared[kSharedBytes];
};

std::atomic<Schedule> g_schedule{Schedule::kAscending};
thread_local Block* g_block = nullptr;                // the block this thread runs
thread_local cudaError_t g_last_error = cudaSuccess;  // per thread, as cudart's
// The largest cudaFuncAttributeMaxDynamicSharedMemorySize given any kernel.
std::atomic<size_t> g_largest_shared_limit{0};

// threadIdx of the thread with linear index `thread` (x fastest; warps are
// runs of 32 linear indices, as on the GPU).
void set_coordinates(int thread) {
  const auto t = static_cast<unsigned>(thread);
  threadIdx =
      make_uint3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
}

void switch_to(Fiber& fiber) {
#ifdef DSCORE_EMULATION_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, fiber.stack.get(), kStackBytes);
#endif
  switch_context(g_block->main, fiber.context);
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
  switch_context(fiber.context, g_block->main);
#ifdef DSCORE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fiber.fake_stack, &g_block->main_stack_bottom,
                                  &g_block->main_stack_size);
#endif
  fiber.products = 0;  // past the barrier
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
  for (size_t t = 0; t < block.threads; ++t) {
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
  const size_t threads = block.threads;
  size_t at_block = 0;
  for (size_t t = 0; t < threads; ++t) at_block += block.fibers[t].state == State::kAtBlockBarrier;
  if (at_block == threads) {
    for (size_t t = 0; t < threads; ++t) block.fibers[t].state = State::kReady;
    for (Warp& w : block.warps) ++w.generation;
    return true;
  }
  bool opened = false;
  for (size_t w = 0; w < threads / 32; ++w) {
    bool all = true;
    for (size_t l = 0; l < 32; ++l)
      all = all && block.fibers[w * 32 + l].state == State::kAtWarpBarrier;
    if (!all) continue;
    for (size_t l = 0; l < 32; ++l) block.fibers[w * 32 + l].state = State::kReady;
    ++block.warps[w].generation;
    opened = true;
  }
  return opened;
}

// A fiber about to start the kernel (a function of its own: getcontext
// returns twice as setjmp does, which would clobber a caller's locals).
void prepare(Fiber& f) {
#ifdef DSCORE_EMULATION_ASAN
  // Frames of the last run never returned (a fiber ends by switching away),
  // so their redzones are still marked.
  __asan_unpoison_memory_region(f.stack.get(), kStackBytes);
#endif
  f.state = State::kReady;
  f.products = 0;
  start_context(f.context, f.stack.get(), kStackBytes, fiber_entry);
}

void run_block(Block& block, int threads, size_t shared_bytes) {
  for (int t = 0; t < threads; ++t) prepare(block.fibers[static_cast<size_t>(t)]);
  for (Warp& w : block.warps) w.products.clear();
  std::memset(block.shared, 0xff, shared_bytes);
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
    for (int t = 0; t < threads; ++t)
      done += block.fibers[static_cast<size_t>(t)].state == State::kDone;
    if (done == block.threads) return;
    if (!open_barriers(block))
      throw std::runtime_error("CUDA emulation: a barrier not every thread reaches, block (" +
                               std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) +
                               ", " + std::to_string(blockIdx.z) + "):" + describe(block));
  }
}

}  // namespace

void set_schedule(Schedule schedule) { g_schedule = schedule; }

cudaError_t take_last_error() { return std::exchange(g_last_error, cudaSuccess); }

cudaError_t failed_call(cudaError_t error) {
  g_last_error = error;
  return error;
}

void raise_shared_limit(int bytes) {
  size_t now = g_largest_shared_limit.load();
  while (now < static_cast<size_t>(bytes) &&
         !g_largest_shared_limit.compare_exchange_weak(now, static_cast<size_t>(bytes))) {
  }
}

int lane() { return g_block->current % 32; }

unsigned char* dynamic_shared_memory() { return g_block->shared; }

uint64_t exchange(uint64_t value, int source) {
  const auto thread = static_cast<size_t>(g_block->current);
  const size_t warp_base = thread / 32 * 32;
  g_block->exchange[thread] = value;
  __syncwarp();
  const uint64_t got = g_block->exchange[warp_base + static_cast<size_t>(source % 32)];
  __syncwarp();
  return got;
}

bool recall_product(const void* tiles, size_t tile_bytes, void* product, size_t product_bytes) {
  Fiber& fiber = g_block->fibers[static_cast<size_t>(g_block->current)];
  const Warp& warp = g_block->warps[static_cast<size_t>(g_block->current / 32)];
  if (fiber.products >= warp.products.size()) return false;
  const Product& p = warp.products[fiber.products];
  if (p.generation != warp.generation || p.tiles.size() != tile_bytes ||
      p.result.size() != product_bytes || std::memcmp(p.tiles.data(), tiles, tile_bytes) != 0)
    return false;
  std::memcpy(product, p.result.data(), product_bytes);
  ++fiber.products;
  return true;
}

void remember_product(const void* tiles, size_t tile_bytes, const void* product,
                      size_t product_bytes) {
  Fiber& fiber = g_block->fibers[static_cast<size_t>(g_block->current)];
  Warp& warp = g_block->warps[static_cast<size_t>(g_block->current / 32)];
  if (warp.products.size() <= fiber.products) warp.products.resize(fiber.products + 1);
  Product& p = warp.products[fiber.products++];
  p.generation = warp.generation;
  const auto* t = static_cast<const unsigned char*>(tiles);
  const auto* r = static_cast<const unsigned char*>(product);
  p.tiles.assign(t, t + tile_bytes);
  p.result.assign(r, r + product_bytes);
}

void fail(const char* message) {
  std::fprintf(stderr, "CUDA emulation: %s (block %u, thread %u)\n", message, blockIdx.x,
               threadIdx.x);
  std::abort();
}

namespace {

void run_grid(const LaunchConfig& config, const std::function<void()>& body) {
  const unsigned threads = config.block.x * config.block.y * config.block.z;
  // One block per running thread, kept between launches: its fiber
  // stacks and shared memory are allocated (and their pages touched) once.
  thread_local const std::unique_ptr<Block> block = std::make_unique<Block>();
  block->fibers.resize(std::max<size_t>(block->fibers.size(), threads));
  for (Fiber& f : block->fibers)
    if (f.stack == nullptr) f.stack = std::make_unique_for_overwrite<char[]>(kStackBytes);
  block->threads = threads;
  block->exchange.assign(threads, 0);
  block->warps.resize(threads / 32);
  block->body = &body;
  g_block = block.get();
  gridDim = config.grid;
  blockDim = config.block;
  try {
    for (unsigned z = 0; z < config.grid.z; ++z)
      for (unsigned y = 0; y < config.grid.y; ++y)
        for (unsigned x = 0; x < config.grid.x; ++x) {
          blockIdx = make_uint3(x, y, z);
          run_block(*block, static_cast<int>(threads), config.shared_bytes);
        }
  } catch (...) {
    g_block = nullptr;
    throw;
  }
  g_block = nullptr;
}

}  // namespace

void launch_grid(const LaunchConfig& config, std::function<void()> body) {
  const unsigned threads = config.block.x * config.block.y * config.block.z;
  const size_t shared_limit = std::max(kDefaultSharedBytes, g_largest_shared_limit.load());
  if (threads == 0 || threads > 1024 || threads % 32 != 0) {
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
  enqueue(config.stream, [config, body = std::move(body)] { run_grid(config, body); });
}

}  // namespace dscore::cuda_emulation

using dscore::cuda_emulation::State;

void __syncthreads() { dscore::cuda_emulation::yield(State::kAtBlockBarrier); }

void __syncwarp(unsigned mask) {
  if (mask != 0xffffffffu) dscore::cuda_emulation::fail("__syncwarp: only full warps are emulated");
  dscore::cuda_emulation::yield(State::kAtWarpBarrier);
}
