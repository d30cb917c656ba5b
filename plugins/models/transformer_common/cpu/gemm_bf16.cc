#include "gemm_bf16.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "amx_gemm.h"
#include "gemm_blocks.h"
#include "parallel.h"
#include "vector_math.h"

#ifdef DSCORE_WITH_ONEDNN
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "openmp_team.h"
#endif

namespace dscore::transformer::cpu {
namespace {

const char* find_unavailable_reason() {
#ifndef DSCORE_WITH_ONEDNN
  return "this build has no oneDNN (DSCORE_WITH_ONEDNN; scripts/setup.sh installs libdnnl-dev)";
#else
  if (!__builtin_cpu_supports("avx512bf16") && !__builtin_cpu_supports("amx-bf16"))
    return "this CPU has no bf16 instructions (avx512_bf16 or AMX)";
  if (vector_isa() != VectorIsa::kAvx512) return "DSCORE_CPU_ISA lowers the ISA below avx512";
  return "";
#endif
}

// Said once, where a bf16 run first asks: which kernel its products take,
// or why it multiplies in fp32.
void log_choice(const char* reason) {
  if (reason[0] != '\0') {
    std::fprintf(stderr,
                 "[dscore] bf16 GEMM: none (%s): bf16 parameters are multiplied in fp32 on the "
                 "fp32 GEMM\n",
                 reason);
    return;
  }
#ifdef DSCORE_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const char* tiles = amx_gemm_unavailable_reason();
  if (tiles[0] == '\0') {
    std::fprintf(stderr, "[dscore] bf16 GEMM: dscore's AMX tiles (amx_bf16)\n");
  } else {
    std::fprintf(stderr, "[dscore] bf16 GEMM: oneDNN %d.%d.%d (not dscore's AMX tiles: %s)\n",
                 v->major, v->minor, v->patch, tiles);
  }
#endif
}

}  // namespace

const char* bf16_gemm_unavailable_reason() {
  static const char* reason = [] {
    const char* found = find_unavailable_reason();
    log_choice(found);
    return found;
  }();
  return reason;
}

bool bf16_gemm_available() { return bf16_gemm_unavailable_reason()[0] == '\0'; }

#ifdef DSCORE_WITH_ONEDNN
namespace {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A primitive per call shape (blocks of one product share at most two).
using ShapeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                            float, bool, bool>;
struct Prepared {
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratchpad;
};

// The cache's entries live as long as the process. With packed_b, B is
// in that (blocked) layout instead of row-major with ldb.
const Prepared& prepare(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda,
                        int64_t ldb, float beta, int64_t ldc, bool with_bias,
                        const memory::desc* packed_b = nullptr) {
  static std::mutex mutex;
  static std::map<ShapeKey, std::shared_ptr<const Prepared>> cache;
  const ShapeKey key{op_a == Op::kTranspose,
                     op_b == Op::kTranspose,
                     m,
                     n,
                     k,
                     lda,
                     ldb,
                     ldc,
                     alpha,
                     beta,
                     with_bias,
                     packed_b != nullptr};
  // Each thread looks in its own copy first: attention calls this for every
  // row block, from every thread.
  thread_local std::map<ShapeKey, const Prepared*> seen;
  if (auto it = seen.find(key); it != seen.end()) return *it->second;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) {
    seen.emplace(key, it->second.get());
    return *it->second;
  }
  // Row-major operands as strides: op(A) is m x k, op(B) k x n.
  const memory::dims a_strides = op_a == Op::kNone ? memory::dims{lda, 1} : memory::dims{1, lda};
  const memory::dims b_strides = op_b == Op::kNone ? memory::dims{ldb, 1} : memory::dims{1, ldb};
  memory::desc a_md({m, k}, memory::data_type::bf16, a_strides);
  const memory::desc b_md =
      packed_b != nullptr ? *packed_b : memory::desc({k, n}, memory::data_type::bf16, b_strides);
  memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  const memory::desc bias_md =
      with_bias ? memory::desc({1, n}, memory::data_type::f32, memory::dims{n, 1}) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // each thread brings its own
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {  // C = alpha * AB + beta * C; with beta 0, C is only written
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(with_bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md)
                                            : dnnl::matmul::desc(a_md, b_md, c_md),
                                  attr, cpu_engine());
  auto prepared = std::make_shared<const Prepared>(
      Prepared{dnnl::matmul(pd), a_md, b_md, c_md, bias_md, pd.scratchpad_desc()});
  cache.emplace(key, prepared);
  seen.emplace(key, prepared.get());
  return *prepared;
}

// A primitive's arguments on one thread, made once: each call only points
// them at its operands (memory objects cost about a microsecond each to
// make, as much as a 64 x 64 x 64 product on AMX).
struct BoundArgs {
  memory a, b, c, bias, scratch;
  std::unordered_map<int, memory> args;
};

BoundArgs& bound_args(const Prepared& p) {
  // Keyed by the cache's entries, which live as long as the process.
  thread_local std::unordered_map<const Prepared*, BoundArgs> bound;
  auto it = bound.find(&p);
  if (it != bound.end()) return it->second;
  auto& engine = cpu_engine();
  BoundArgs b{memory(p.a, engine, nullptr),          memory(p.b, engine, nullptr),
              memory(p.c, engine, nullptr),          memory(),
              memory(p.scratchpad, engine, nullptr), {}};
  b.args = {{DNNL_ARG_SRC, b.a},
            {DNNL_ARG_WEIGHTS, b.b},
            {DNNL_ARG_DST, b.c},
            {DNNL_ARG_SCRATCHPAD, b.scratch}};
  if (!p.bias.is_zero()) {
    b.bias = memory(p.bias, engine, nullptr);
    b.args.emplace(DNNL_ARG_BIAS, b.bias);
  }
  return bound.emplace(&p, std::move(b)).first->second;
}

void onednn_gemm(const Prepared& p, const uint16_t* a, const uint16_t* b, float* c,
                 const float* bias) {
  single_threaded_openmp();
  thread_local dnnl::stream stream(cpu_engine());
  thread_local AlignedVector<uint8_t> scratch;
  if (scratch.size() < p.scratchpad.get_size()) scratch.resize(p.scratchpad.get_size());
  BoundArgs& args = bound_args(p);
  args.a.set_data_handle(const_cast<uint16_t*>(a));
  args.b.set_data_handle(const_cast<uint16_t*>(b));
  args.c.set_data_handle(c);
  args.scratch.set_data_handle(scratch.data());
  if (bias != nullptr) args.bias.set_data_handle(const_cast<float*>(bias));
  p.matmul.execute(stream, args.args);
}

}  // namespace

void gemm_bf16(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc,
               const float* bias) {
  if (!bf16_gemm_available())
    throw std::logic_error(std::string("gemm_bf16 called where it is unavailable: ") +
                           bf16_gemm_unavailable_reason());
  if (bias != nullptr && alpha != 1.0f) throw std::logic_error("gemm_bf16: a bias needs alpha 1");
  if (m <= 0 || n <= 0) return;
  if (amx_gemm_available() && (beta == 0.0f || beta == 1.0f)) {
    amx_gemm_blocks(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
    return;
  }
  if (k <= 0) {  // no product: C = bias + beta * C (oneDNN wants k > 0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] =
            (bias != nullptr ? bias[j] : 0.0f) + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    return;
  }
  gemm_in_blocks(
      op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc,
      [&](int64_t rows, int64_t cols, const uint16_t* a0, const uint16_t* b0, float* c0) {
        // The calling thread prepares too: OpenMP is told one
        // thread before oneDNN sizes the primitive's work.
        single_threaded_openmp();
        const Prepared& p =
            prepare(op_a, op_b, rows, cols, k, alpha, lda, ldb, beta, ldc, bias != nullptr);
        // A block of columns starts at its first column's bias.
        onednn_gemm(p, a0, b0, c0, bias != nullptr ? bias + (c0 - c) % ldc : nullptr);
      },
      /*prefer_rows=*/op_a == Op::kNone);
}

void gemm_bf16_serial(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  if (!bf16_gemm_available())
    throw std::logic_error(std::string("gemm_bf16_serial called where it is unavailable: ") +
                           bf16_gemm_unavailable_reason());
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // no product: C = beta * C (oneDNN wants k > 0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  single_threaded_openmp();
  onednn_gemm(prepare(op_a, op_b, m, n, k, alpha, lda, ldb, beta, ldc, false), a, b, c, nullptr);
}

namespace {

// How B (k x n) is copied into the blocked layout oneDNN's AMX kernel reads
// (the one it picks for chunks of kConsumedRows rows; blocks of other row
// counts are made to read the same one).
struct Packer {
  memory::desc plain, packed;
  dnnl::reorder reorder;
};
const Packer& packer_for(Op op_b, int64_t n, int64_t k, int64_t ldb) {
  static std::mutex mutex;
  static std::map<std::tuple<bool, int64_t, int64_t, int64_t>, std::unique_ptr<const Packer>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{op_b == Op::kTranspose, n, k, ldb}];
  if (entry == nullptr) {
    using dt = memory::data_type;
    const memory::desc plain({k, n}, dt::bf16,
                             op_b == Op::kNone ? memory::dims{ldb, 1} : memory::dims{1, ldb});
    const memory::desc any({k, n}, dt::bf16, memory::format_tag::any);
    const memory::desc a({kConsumedRows, k}, dt::bf16, memory::dims{k, 1});
    const memory::desc c({kConsumedRows, n}, dt::f32, memory::dims{n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, any, c), attr, cpu_engine());
    const memory::desc packed = pd.weights_desc();
    entry = std::make_unique<const Packer>(Packer{
        plain, packed,
        dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plain, cpu_engine(), packed))});
  }
  return *entry;
}

const memory::desc& packed_desc(const Bf16PackedB& b) {
  return static_cast<const Packer*>(b.layout())->packed;
}

}  // namespace

Bf16PackedB::Bf16PackedB(Op op_b, int64_t n, int64_t k, const uint16_t* b, int64_t ldb,
                         AlignedVector<uint8_t>& storage)
    : op_b_(op_b), n_(n), k_(k) {
  if (!bf16_gemm_available())
    throw std::logic_error(std::string("Bf16PackedB made where the bf16 GEMM is unavailable: ") +
                           bf16_gemm_unavailable_reason());
  if (n <= 0 || k <= 0) throw std::logic_error("Bf16PackedB: an empty B");
  if (amx_gemm_available()) {
    thread_local AmxB kept;
    kept.pack(op_b, k, n, b, ldb, /*over_threads=*/true);
    tiles_ = &kept;
    return;
  }
  const Packer& packer = packer_for(op_b, n, k, ldb);
  layout_ = &packer;
  if (storage.size() < packer.packed.get_size()) storage.resize(packer.packed.get_size());
  data_ = storage.data();
  single_threaded_openmp();
  thread_local dnnl::stream stream(cpu_engine());
  memory src(packer.plain, cpu_engine(), const_cast<uint16_t*>(b));
  memory dst(packer.packed, cpu_engine(), storage.data());
  packer.reorder.execute(stream, src, dst);
}

uint64_t bf16_packed_bytes(Op op_b, int64_t n, int64_t k) {
  if (!bf16_gemm_available() || n <= 0 || k <= 0) return 0;
  if (amx_gemm_available()) return amx_b_bytes(k, n);
  return packer_for(op_b, n, k, op_b == Op::kNone ? n : k).packed.get_size();
}

void gemm_bf16_packed(int64_t m, const uint16_t* a, int64_t lda, const Bf16PackedB& b, float* c,
                      int64_t ldc) {
  if (m <= 0) return;
  if (b.tiles() != nullptr) {  // chunks of rows on AMX tiles, B's columns in cached panels
    amx_gemm_rows(Op::kNone, m, a, lda, *b.tiles(), 1.0f, 0.0f, c, ldc);
    return;
  }
  const int64_t block = m * b.n() * b.k() < kGemmSerialWork ? m : gemm_block_for(m);
  const auto rows_of = [&](int64_t i0) {
    const int64_t rows = std::min(block, m - i0);
    single_threaded_openmp();
    onednn_gemm(prepare(Op::kNone, b.op_b(), rows, b.n(), b.k(), 1.0f, lda, 0, 0.0f, ldc, false,
                        &packed_desc(b)),
                a + i0 * lda, reinterpret_cast<const uint16_t*>(b.data()), c + i0 * ldc, nullptr);
  };
  for_blocks(m, block, [&](int64_t i0, int64_t) { rows_of(i0); });
}

namespace {

// gemm_bf16_consumed on AMX tiles: B copied into their layout once (over
// TBB), each chunk's rows of A copied by its task.
void consumed_on_amx(Op op_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, const float* bias,
                     const ConsumeRows& consume) {
  thread_local AmxB packed;  // the calling thread's, kept from call to call
  AmxB& shared = packed;     // named here: inside the tasks, packed is each worker's own
  shared.pack(op_b, k, n, b, ldb, /*over_threads=*/true);
  for_blocks(m, kConsumedRows, [&](int64_t r0, int64_t r1) {
    thread_local AlignedVector<float> chunk;
    thread_local AmxA rows;
    if (chunk.size() < static_cast<size_t>((r1 - r0) * n))
      chunk.resize(static_cast<size_t>((r1 - r0) * n));
    rows.use(r1 - r0, k, a + r0 * lda, lda);
    amx_gemm(rows, shared, 1.0f, 0.0f, chunk.data(), n, bias);
    consume(r0, r1, chunk.data());
  });
}

}  // namespace

void gemm_bf16_consumed(Op op_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                        const uint16_t* b, int64_t ldb, const float* bias,
                        const ConsumeRows& consume) {
  if (!bf16_gemm_available())
    throw std::logic_error(std::string("gemm_bf16_consumed called where it is unavailable: ") +
                           bf16_gemm_unavailable_reason());
  if (m <= 0 || n <= 0) return;
  if (amx_gemm_available()) {
    consumed_on_amx(op_b, m, n, k, a, lda, b, ldb, bias, consume);
    return;
  }
  single_threaded_openmp();
  thread_local AlignedVector<uint8_t> storage;  // the calling thread's, as dout_bf16's
  std::optional<Bf16PackedB> packed;
  if (k > 0) packed.emplace(op_b, n, k, b, ldb, storage);
  for_blocks(m, kConsumedRows, [&](int64_t r0, int64_t r1) {
    thread_local AlignedVector<float> chunk;
    const int64_t rows = r1 - r0;
    if (chunk.size() < static_cast<size_t>(rows * n)) chunk.resize(static_cast<size_t>(rows * n));
    float* c = chunk.data();
    if (k <= 0) {  // no product: the bias alone (oneDNN wants k > 0)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * n + j] = bias != nullptr ? bias[j] : 0.0f;
    } else {
      single_threaded_openmp();
      onednn_gemm(prepare(Op::kNone, op_b, rows, n, k, 1.0f, lda, ldb, 0.0f, n, bias != nullptr,
                          &packed_desc(*packed)),
                  a + r0 * lda, reinterpret_cast<const uint16_t*>(packed->data()), c, bias);
    }
    consume(r0, r1, c);
  });
}

#else

Bf16PackedB::Bf16PackedB(Op op_b, int64_t n, int64_t k, const uint16_t*, int64_t,
                         AlignedVector<uint8_t>&)
    : op_b_(op_b), n_(n), k_(k) {
  throw std::logic_error(std::string("Bf16PackedB made where the bf16 GEMM is unavailable: ") +
                         bf16_gemm_unavailable_reason());
}

uint64_t bf16_packed_bytes(Op, int64_t, int64_t) { return 0; }

void gemm_bf16_packed(int64_t, const uint16_t*, int64_t, const Bf16PackedB&, float*, int64_t) {
  throw std::logic_error(std::string("gemm_bf16_packed called where it is unavailable: ") +
                         bf16_gemm_unavailable_reason());
}

void gemm_bf16_consumed(Op, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*,
                        int64_t, const float*, const ConsumeRows&) {
  throw std::logic_error(std::string("gemm_bf16_consumed called where it is unavailable: ") +
                         bf16_gemm_unavailable_reason());
}

void gemm_bf16_serial(Op, Op, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                      const uint16_t*, int64_t, float, float*, int64_t) {
  throw std::logic_error(std::string("gemm_bf16_serial called where it is unavailable: ") +
                         bf16_gemm_unavailable_reason());
}

void gemm_bf16(Op, Op, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*,
               int64_t, float, float*, int64_t, const float*) {
  throw std::logic_error(std::string("gemm_bf16 called where it is unavailable: ") +
                         bf16_gemm_unavailable_reason());
}

#endif

}  // namespace dscore::transformer::cpu
