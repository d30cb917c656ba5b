#include "amx_gemm.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "vector_math.h"

namespace dscore::transformer::cpu {
namespace {

constexpr int64_t kTileRows = 16;     // rows of A and C a tile holds
constexpr int64_t kTileInner = 32;    // bf16 values of the inner size a tile row holds
constexpr int64_t kTileValues = 512;  // 16 x 32 bf16: one KiB
constexpr int64_t kBlock = 32;        // C is made 32 x 32 at a time: two tiles each way

constexpr long kArchRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
constexpr long kTileDataFeature = 18;            // XFEATURE_XTILEDATA

const char* find_unavailable_reason() {
  if (amx_gemm_declined(std::getenv("DSCORE_BF16_GEMM")))
    return "DSCORE_BF16_GEMM=onednn keeps oneDNN's kernels";
  if (!__builtin_cpu_supports("amx-bf16")) return "this CPU has no AMX (amx_bf16)";
  if (vector_isa() != VectorIsa::kAvx512) return "DSCORE_CPU_ISA lowers the ISA below avx512";
  // Linux hands a process the tiles' 8 KiB of state only when asked.
  if (syscall(SYS_arch_prctl, kArchRequestPermission, kTileDataFeature) != 0)
    return "Linux did not grant the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
  return "";
}

int64_t tiles_of(int64_t extent, int64_t per_tile) { return (extent + per_tile - 1) / per_tile; }
// Row (or column) tiles come in pairs: one 32-wide block of C uses two.
int64_t paired_tiles(int64_t extent) { return 2 * tiles_of(extent, kBlock); }

// A 16 x 16 matrix of 32-bit values (one per lane of r[0..15]) transposed.
// The maskz forms with every lane set: GCC 12 warns that the unmasked ones
// read an uninitialised pass-through vector.
__attribute__((target("avx512f"))) inline void transpose_16x16(__m512i r[16]) {
  constexpr __mmask16 all = 0xffff;
  constexpr __mmask8 all64 = 0xff;
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(all, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(all64, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(all64, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(all64, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(all64, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int q = 0; q < 4; ++q) {
      t[i + q] = _mm512_maskz_shuffle_i32x4(all, r[i + q], r[i + q + 4], 0x88);
      t[i + q + 4] = _mm512_maskz_shuffle_i32x4(all, r[i + q], r[i + q + 4], 0xdd);
    }
  for (int q = 0; q < 8; ++q) {
    r[q] = _mm512_maskz_shuffle_i32x4(all, t[q], t[q + 8], 0x88);
    r[q + 8] = _mm512_maskz_shuffle_i32x4(all, t[q], t[q + 8], 0xdd);
  }
}

// Two rows of 16 bf16 values interleaved: lane j holds (x[j], y[j]).
__attribute__((target("avx512f,avx512bw"))) inline __m512i interleave_16(const uint16_t* x,
                                                                         const uint16_t* y) {
  const __m512i pick = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                        8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  constexpr __mmask32 first16 = 0xffff;
  const __m512i lo = _mm512_maskz_loadu_epi16(first16, x),
                hi = _mm512_maskz_loadu_epi16(first16, y);
  return _mm512_permutex2var_epi16(lo, pick, hi);
}

// Two rows of 32 bf16 values (one cache line each) interleaved: *first
// holds (x[j], y[j]) for j < 16 in lane j, *second for j >= 16 in lane j -
// 16. Two tiles' rows from whole lines: a tile's 16 columns alone used half
// of each line it read, and on operands larger than the L2 the other half
// came from memory again (2.8 times memcpy's time; paired, about memcpy's).
__attribute__((target("avx512f,avx512bw"))) inline void interleave_32(const uint16_t* x,
                                                                      const uint16_t* y,
                                                                      __m512i* first,
                                                                      __m512i* second) {
  constexpr __mmask32 all = 0xffffffff;
  const __m512i a = _mm512_loadu_si512(x), b = _mm512_loadu_si512(y);
  // Each 128-bit lane L: lo the pairs of columns 8L..8L+3, hi of 8L+4..8L+7.
  const __m512i lo = _mm512_maskz_unpacklo_epi16(all, a, b);
  const __m512i hi = _mm512_maskz_unpackhi_epi16(all, a, b);
  *first = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
  *second = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);
}

// One tile filled value by value from value(row, column) of the tile's own
// coordinates, zero outside rows x columns: the edges of any operand.
template <typename Value>
void fill_tile(uint16_t* tile, int64_t rows, int64_t values_per_row, Value&& value) {
  std::memset(tile, 0, kTileValues * sizeof(uint16_t));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < values_per_row; ++v) tile[r * kTileInner + v] = value(r, v);
}

// A's tile (row tile it, inner tile kt): 16 rows of 32 inner values.
__attribute__((target("avx512f,avx512bw"))) void pack_a_tile(uint16_t* tile, Op op, int64_t m,
                                                             int64_t k, const uint16_t* a,
                                                             int64_t lda, int64_t r0, int64_t k0) {
  const int64_t rows = std::clamp<int64_t>(m - r0, 0, kTileRows);
  const int64_t inner = std::clamp<int64_t>(k - k0, 0, kTileInner);
  if (op == Op::kNone && inner == kTileInner) {  // rows copied whole
    for (int64_t r = 0; r < kTileRows; ++r)
      _mm512_store_si512(tile + r * kTileInner, r < rows
                                                    ? _mm512_loadu_si512(a + (r0 + r) * lda + k0)
                                                    : _mm512_setzero_si512());
    return;
  }
  if (op == Op::kTranspose && rows == kTileRows && inner == kTileInner) {
    // A(r, k) = a[k * lda + r]: source rows k0+2p and k0+2p+1 interleaved
    // give p's pairs for the 16 rows, then transposed to rows of pairs.
    __m512i pairs[16];
    for (int p = 0; p < 16; ++p)
      pairs[p] = interleave_16(a + (k0 + 2 * p) * lda + r0, a + (k0 + 2 * p + 1) * lda + r0);
    transpose_16x16(pairs);
    for (int r = 0; r < 16; ++r) _mm512_store_si512(tile + r * kTileInner, pairs[r]);
    return;
  }
  fill_tile(tile, rows, inner, [&](int64_t r, int64_t v) {
    return op == Op::kNone ? a[(r0 + r) * lda + k0 + v] : a[(k0 + v) * lda + r0 + r];
  });
}

// B's tile (column tile jt, inner tile kt): row p holds, for each of 16
// columns, the inner values 2p and 2p + 1 side by side.
__attribute__((target("avx512f,avx512bw"))) void pack_b_tile(uint16_t* tile, Op op, int64_t k,
                                                             int64_t n, const uint16_t* b,
                                                             int64_t ldb, int64_t j0, int64_t k0) {
  const int64_t cols = std::clamp<int64_t>(n - j0, 0, kTileRows);
  const int64_t inner = std::clamp<int64_t>(k - k0, 0, kTileInner);
  if (op == Op::kNone && cols == kTileRows && inner == kTileInner) {
    // B(k, j) = b[k * ldb + j]: rows k0+2p and k0+2p+1 interleaved.
    for (int p = 0; p < 16; ++p)
      _mm512_store_si512(tile + p * kTileInner, interleave_16(b + (k0 + 2 * p) * ldb + j0,
                                                              b + (k0 + 2 * p + 1) * ldb + j0));
    return;
  }
  if (op == Op::kTranspose && cols == kTileRows && inner == kTileInner) {
    // B(k, j) = b[j * ldb + k]: column j's pairs are the 32-bit values of
    // its source row, so the tile is those rows transposed.
    __m512i rows[16];
    for (int j = 0; j < 16; ++j) rows[j] = _mm512_loadu_si512(b + (j0 + j) * ldb + k0);
    transpose_16x16(rows);
    for (int p = 0; p < 16; ++p) _mm512_store_si512(tile + p * kTileInner, rows[p]);
    return;
  }
  // Value (p, 2c + s) is B(k0 + 2p + s, j0 + c).
  fill_tile(tile, tiles_of(inner, 2), 2 * cols, [&](int64_t p, int64_t v) -> uint16_t {
    const int64_t kk = k0 + 2 * p + v % 2, j = j0 + v / 2;
    if (kk >= k) return 0;
    return op == Op::kNone ? b[kk * ldb + j] : b[j * ldb + kk];
  });
}

// A transposed A's two tiles of row tiles it and it + 1 (rows r0..r0+31,
// inner k0..k0+31, all inside A), from whole source lines.
__attribute__((target("avx512f,avx512bw"))) void pack_a_tile_pair(uint16_t* tile0, uint16_t* tile1,
                                                                  const uint16_t* a, int64_t lda,
                                                                  int64_t r0, int64_t k0) {
  __m512i pairs0[16], pairs1[16];
  for (int p = 0; p < 16; ++p)
    interleave_32(a + (k0 + 2 * p) * lda + r0, a + (k0 + 2 * p + 1) * lda + r0, &pairs0[p],
                  &pairs1[p]);
  transpose_16x16(pairs0);
  transpose_16x16(pairs1);
  for (int r = 0; r < 16; ++r) {
    _mm512_store_si512(tile0 + r * kTileInner, pairs0[r]);
    _mm512_store_si512(tile1 + r * kTileInner, pairs1[r]);
  }
}

// A row-major B's two tiles of column tiles jt and jt + 1 (columns
// j0..j0+31, inner k0..k0+31, all inside B), from whole source lines.
__attribute__((target("avx512f,avx512bw"))) void pack_b_tile_pair(uint16_t* tile0, uint16_t* tile1,
                                                                  const uint16_t* b, int64_t ldb,
                                                                  int64_t j0, int64_t k0) {
  for (int p = 0; p < 16; ++p) {
    __m512i first, second;
    interleave_32(b + (k0 + 2 * p) * ldb + j0, b + (k0 + 2 * p + 1) * ldb + j0, &first, &second);
    _mm512_store_si512(tile0 + p * kTileInner, first);
    _mm512_store_si512(tile1 + p * kTileInner, second);
  }
}

struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// C's 32 x 32 block at (i, j) from A's row tiles 2*ib, 2*ib+1 and B's
// column tiles 2*jb, 2*jb+1 over kt inner tiles (B's lie b_kt apart). Tiles 0-3 accumulate, 4-5
// hold A, 6-7 B.
__attribute__((target("amx-tile,amx-bf16"))) inline void multiply_block(const AmxA& a,
                                                                        const uint16_t* a0,
                                                                        const uint16_t* b0,
                                                                        int64_t kt, int64_t b_kt) {
  const uint16_t* a1 = a0 + a.row_tile_step();
  const uint16_t* b1 = b0 + b_kt * kTileValues;
  const int64_t a_step = a.inner_step(), a_stride = a.stride_bytes();
  for (int64_t t = 0; t < kt; ++t) {
    _tile_loadd(4, a0 + t * a_step, a_stride);
    _tile_loadd(6, b0 + t * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + t * kTileValues, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + t * a_step, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// The edge of C (or any block with alpha != 1, or a bias and beta 1): the
// four tiles through a 32 x 32 buffer, then alpha * sum (+ bias) (+ C) into
// the block's valid part.
__attribute__((target("amx-tile,avx512f"))) void store_through_buffer(float* c, int64_t ldc,
                                                                      int64_t rows, int64_t cols,
                                                                      float alpha, bool add,
                                                                      const float* bias) {
  alignas(64) float sum[kBlock * kBlock];
  constexpr int64_t kStride = kBlock * sizeof(float);
  _tile_stored(0, sum, kStride);
  _tile_stored(1, sum + 16, kStride);
  _tile_stored(2, sum + 16 * kBlock, kStride);
  _tile_stored(3, sum + 16 * kBlock + 16, kStride);
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t left = cols - 16 * h;
      if (left <= 0) break;
      const __mmask16 mask = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      float* out = c + r * ldc + 16 * h;
      __m512 v = _mm512_mul_ps(scale, _mm512_load_ps(sum + r * kBlock + 16 * h));
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + 16 * h));
      if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, out));
      _mm512_mask_storeu_ps(out, mask, v);
    }
}

// C (a.m() x n) from A and B's first a.k() inner rows and its n columns
// from first_column (a multiple of 32).
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void multiply(const AmxA& a, const AmxB& b,
                                                                   int64_t first_column, int64_t n,
                                                                   float alpha, bool add,
                                                                   const float* bias, float* c,
                                                                   int64_t ldc) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kTileRows;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
  const int64_t m = a.m(), kt = tiles_of(a.k(), kTileInner);
  const int64_t b_kt = tiles_of(b.k(), kTileInner);  // B's column tiles lie this many tiles apart
  const int64_t ldc_bytes = ldc * static_cast<int64_t>(sizeof(float));
  for (int64_t i = 0; i < m; i += kBlock) {
    const uint16_t* a0 = a.data() + (i / kTileRows) * a.row_tile_step();
    for (int64_t j = 0; j < n; j += kBlock) {
      const uint16_t* b0 = b.tiles() + ((first_column + j) / kTileRows) * b_kt * kTileValues;
      float* block = c + i * ldc + j;
      const bool whole =
          i + kBlock <= m && j + kBlock <= n && alpha == 1.0f && (bias == nullptr || !add);
      if (whole && add) {
        _tile_loadd(0, block, ldc_bytes);
        _tile_loadd(1, block + 16, ldc_bytes);
        _tile_loadd(2, block + 16 * ldc, ldc_bytes);
        _tile_loadd(3, block + 16 * ldc + 16, ldc_bytes);
      } else if (whole && bias != nullptr) {  // every row starts at the bias (a stride of 0)
        _tile_loadd(0, bias + j, 0);
        _tile_loadd(1, bias + j + 16, 0);
        _tile_loadd(2, bias + j, 0);
        _tile_loadd(3, bias + j + 16, 0);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      multiply_block(a, a0, b0, kt, b_kt);
      if (whole) {
        _tile_stored(0, block, ldc_bytes);
        _tile_stored(1, block + 16, ldc_bytes);
        _tile_stored(2, block + 16 * ldc, ldc_bytes);
        _tile_stored(3, block + 16 * ldc + 16, ldc_bytes);
      } else {
        store_through_buffer(block, ldc, std::min(kBlock, m - i), std::min(kBlock, n - j), alpha,
                             add, bias == nullptr ? nullptr : bias + j);
      }
    }
  }
  _tile_release();
}

// pack(pair, t) for each pair of row (or column) tiles and each inner tile
// t: over TBB where asked and the copy is large (an operand every chunk of
// a product shares), else on the calling thread. Never over TBB inside a
// task of another parallel loop: a thread waiting for the inner loop may
// take one of the outer loop's tasks, which would overwrite the copy its
// thread keeps (thread_local) mid-use. Each tile is written by one task
// whatever the split: the same bytes.
// inner_rows: the source's rows run along the inner size (a transposed A,
// a row-major B). Then a tile's 32 source rows are read across, for every
// pair, before the next 32: walking down one pair's columns instead touched
// a new page every row or two (2048 x 1536 operands: the TLB missed).
template <typename Pack>
void for_tile_pairs(int64_t pairs, int64_t kt, bool inner_rows, bool over_threads, Pack&& pack) {
  constexpr int64_t kParallelTiles = 256;  // 256 KiB of tiles
  const int64_t outer = inner_rows ? kt : pairs, inner = inner_rows ? pairs : kt;
  const auto row = [&](int64_t o) {
    for (int64_t i = 0; i < inner; ++i) inner_rows ? pack(i, o) : pack(o, i);
  };
  if (!over_threads || 2 * pairs * kt < kParallelTiles) {
    for (int64_t o = 0; o < outer; ++o) row(o);
    return;
  }
  tbb::parallel_for(int64_t{0}, outer, row);
}

// B's columns per panel: a panel of the copied B (kc inner) of at most
// kPanelBytes, whole 32-column blocks, at least one.
int64_t panel_columns(int64_t kc, int64_t n) {
  constexpr int64_t kPanelBytes = int64_t{1} << 20;  // half this machine's 2 MiB L2
  const int64_t bytes_per_column = std::max<int64_t>(kc, 1) * int64_t{sizeof(uint16_t)};
  const int64_t columns = std::max<int64_t>(kPanelBytes / bytes_per_column / kBlock, 1) * kBlock;
  return std::min(columns, std::max<int64_t>(n, 1));
}

// An AmxA or AmxB lent by the calling thread's pool for one scope: the
// copies keep their memory from call to call (a fresh one was allocated,
// zeroed and page-faulted in on every product), and a product started
// inside another on the same thread (a TBB worker that takes an outer
// loop's task while it waits) gets a copy of its own.
template <typename Copy>
class Pooled {
 public:
  Pooled() {
    auto& pool = free_copies();
    if (pool.empty()) {
      copy_ = std::make_unique<Copy>();
    } else {
      copy_ = std::move(pool.back());
      pool.pop_back();
    }
  }
  ~Pooled() { free_copies().push_back(std::move(copy_)); }
  Pooled(const Pooled&) = delete;
  Pooled& operator=(const Pooled&) = delete;
  Copy& operator*() const { return *copy_; }

 private:
  static std::vector<std::unique_ptr<Copy>>& free_copies() {
    thread_local std::vector<std::unique_ptr<Copy>> pool;
    return pool;
  }
  std::unique_ptr<Copy> copy_;
};

}  // namespace

bool amx_gemm_declined(const char* asked) {
  if (asked == nullptr || *asked == '\0' || std::strcmp(asked, "amx") == 0) return false;
  if (std::strcmp(asked, "onednn") == 0) return true;
  throw std::invalid_argument(std::string("DSCORE_BF16_GEMM=") + asked +
                              " names no bf16 kernel: use amx (the default where the CPU has it) "
                              "or onednn");
}

const char* amx_gemm_unavailable_reason() {
  static const char* reason = find_unavailable_reason();
  return reason;
}

namespace {
std::atomic<bool> g_declined{false};  // set_amx_gemm_declined
}  // namespace

bool amx_gemm_available() {
  return amx_gemm_unavailable_reason()[0] == '\0' && !g_declined.load(std::memory_order_relaxed);
}

void set_amx_gemm_declined(bool declined) { g_declined.store(declined); }

void AmxA::use(int64_t m, int64_t k, const uint16_t* a, int64_t lda) {
  if (m % kBlock != 0 || k % kTileInner != 0) {
    pack(Op::kNone, m, k, a, lda);
    return;
  }
  m_ = m;
  k_ = k;
  data_ = a;
  row_tile_step_ = kTileRows * lda;
  inner_step_ = kTileInner;
  stride_bytes_ = lda * static_cast<int64_t>(sizeof(uint16_t));
}

void AmxA::pack(Op op, int64_t m, int64_t k, const uint16_t* a, int64_t lda, bool over_threads) {
  m_ = m;
  k_ = k;
  const int64_t mt = paired_tiles(m), kt = tiles_of(k, kTileInner);
  const size_t values = static_cast<size_t>(mt * kt * kTileValues);
  if (tiles_.size() < values) tiles_.resize(values);
  data_ = tiles_.data();
  row_tile_step_ = kt * kTileValues;
  inner_step_ = kTileValues;
  stride_bytes_ = kTileInner * static_cast<int64_t>(sizeof(uint16_t));
  for_tile_pairs(mt / 2, kt, op == Op::kTranspose, over_threads, [&](int64_t pair, int64_t t) {
    const int64_t it = 2 * pair, r0 = it * kTileRows, k0 = t * kTileInner;
    uint16_t* first = tiles_.data() + (it * kt + t) * kTileValues;
    uint16_t* second = first + kt * kTileValues;
    if (op == Op::kTranspose && r0 + kBlock <= m && k0 + kTileInner <= k) {
      pack_a_tile_pair(first, second, a, lda, r0, k0);
      return;
    }
    pack_a_tile(first, op, m, k, a, lda, r0, k0);
    pack_a_tile(second, op, m, k, a, lda, r0 + kTileRows, k0);
  });
}

void AmxB::pack(Op op, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, bool over_threads) {
  k_ = k;
  n_ = n;
  const int64_t nt = paired_tiles(n), kt = tiles_of(k, kTileInner);
  const size_t values = static_cast<size_t>(nt * kt * kTileValues);
  if (tiles_.size() < values) tiles_.resize(values);
  for_tile_pairs(nt / 2, kt, op == Op::kNone, over_threads, [&](int64_t pair, int64_t t) {
    const int64_t jt = 2 * pair, j0 = jt * kTileRows, k0 = t * kTileInner;
    uint16_t* first = tiles_.data() + (jt * kt + t) * kTileValues;
    uint16_t* second = first + kt * kTileValues;
    if (op == Op::kNone && j0 + kBlock <= n && k0 + kTileInner <= k) {
      pack_b_tile_pair(first, second, b, ldb, j0, k0);
      return;
    }
    pack_b_tile(first, op, k, n, b, ldb, j0, k0);
    pack_b_tile(second, op, k, n, b, ldb, j0 + kTileRows, k0);
  });
}

void amx_gemm_columns(const AmxA& a, const AmxB& b, int64_t first_column, int64_t n, float alpha,
                      float beta, float* c, int64_t ldc, const float* bias) {
  if (!amx_gemm_available())
    throw std::logic_error(std::string("amx_gemm called where it is unavailable: ") +
                           amx_gemm_unavailable_reason());
  if (a.k() > b.k() || first_column < 0 || first_column % kBlock != 0 || first_column + n > b.n())
    throw std::logic_error("amx_gemm: A's inner size " + std::to_string(a.k()) + " and columns " +
                           std::to_string(first_column) + " + " + std::to_string(n) +
                           " exceed B's " + std::to_string(b.k()) + " x " + std::to_string(b.n()) +
                           " (or start off a 32-column block)");
  if (beta != 0.0f && beta != 1.0f) throw std::logic_error("amx_gemm: beta must be 0 or 1");
  if (a.m() <= 0 || n <= 0) return;
  if (bias != nullptr && alpha != 1.0f) throw std::logic_error("amx_gemm: a bias needs alpha 1");
  multiply(a, b, first_column, n, alpha, beta == 1.0f, bias, c, ldc);
}

void amx_gemm_part(const AmxA& a, const AmxB& b, int64_t n, float alpha, float beta, float* c,
                   int64_t ldc, const float* bias) {
  amx_gemm_columns(a, b, 0, n, alpha, beta, c, ldc, bias);
}

void amx_gemm(const AmxA& a, const AmxB& b, float alpha, float beta, float* c, int64_t ldc,
              const float* bias) {
  if (a.k() != b.k())
    throw std::logic_error("amx_gemm: A's inner size " + std::to_string(a.k()) + " is not B's " +
                           std::to_string(b.k()));
  amx_gemm_part(a, b, b.n(), alpha, beta, c, ldc, bias);
}

void amx_gemm_rows(Op op_a, int64_t m, const uint16_t* a, int64_t lda, const AmxB& b, float alpha,
                   float beta, float* c, int64_t ldc, const float* bias) {
  const int64_t n = b.n(), k = b.k();
  if (m <= 0 || n <= 0) return;
  const int64_t chunks = (m + kAmxChunk - 1) / kAmxChunk;
  // B's columns in panels that stay in cache while every chunk of rows
  // meets them (panel after panel: the threads share one).
  const int64_t panel = panel_columns(k, n), panels = (n + panel - 1) / panel;
  tbb::parallel_for(int64_t{0}, panels * chunks, [&](int64_t item) {
    const int64_t at = (item % chunks) * kAmxChunk, size = std::min(kAmxChunk, m - at);
    const int64_t j0 = (item / chunks) * panel;
    thread_local AmxA rows;
    if (op_a == Op::kNone) {
      rows.use(size, k, a + at * lda, lda);
    } else {
      rows.pack(op_a, size, k, a + at, lda);
    }
    amx_gemm_columns(rows, b, j0, std::min(panel, n - j0), alpha, beta, c + at * ldc + j0, ldc,
                     bias == nullptr ? nullptr : bias + j0);
  });
}

void amx_gemm_blocks(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                     float* c, int64_t ldc, const float* bias) {
  if (m <= 0 || n <= 0) return;
  const bool by_rows = m >= n;
  // The operand every chunk reads, copied once per inner block (over TBB);
  // each chunk copies its own part of the other.
  const Pooled<AmxA> pooled_a;
  const Pooled<AmxB> pooled_b;
  AmxA& shared_a = *pooled_a;
  AmxB& shared_b = *pooled_b;
  const int64_t inner_block = op_a == Op::kNone ? kAmxInnerBlock : kAmxCopiedInnerBlock;
  for (int64_t k0 = 0; k0 < std::max<int64_t>(k, 1); k0 += inner_block) {
    const int64_t kc = std::min(inner_block, k - k0);
    const uint16_t* a0 = op_a == Op::kNone ? a + k0 : a + k0 * lda;
    const uint16_t* b0 = op_b == Op::kNone ? b + k0 * ldb : b + k0;
    // The first inner block meets C as asked (beta, the bias); later ones add.
    const float block_beta = k0 == 0 ? beta : 1.0f;
    const float* block_bias = k0 == 0 ? bias : nullptr;
    if (by_rows) {
      shared_b.pack(op_b, kc, n, b0, ldb, /*over_threads=*/true);
      amx_gemm_rows(op_a, m, a0, lda, shared_b, alpha, block_beta, c, ldc, block_bias);
      continue;
    }
    shared_a.pack(op_a, m, kc, a0, lda, /*over_threads=*/true);
    tbb::parallel_for(int64_t{0}, (n + kAmxChunk - 1) / kAmxChunk, [&](int64_t chunk) {
      const int64_t at = chunk * kAmxChunk, size = std::min(kAmxChunk, n - at);
      thread_local AmxB cols;
      cols.pack(op_b, kc, size, op_b == Op::kNone ? b0 + at : b0 + at * ldb, ldb);
      amx_gemm(shared_a, cols, alpha, block_beta, c + at, ldc,
               block_bias == nullptr ? nullptr : block_bias + at);
    });
  }
}

uint64_t amx_a_bytes(int64_t m, int64_t k) {
  return static_cast<uint64_t>(paired_tiles(m) * tiles_of(k, kTileInner) * kTileValues) *
         sizeof(uint16_t);
}

uint64_t amx_b_bytes(int64_t k, int64_t n) { return amx_a_bytes(n, k); }

}  // namespace dscore::transformer::cpu
