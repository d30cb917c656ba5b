// How gemm() and gemm_bf16() cut one product into calls: fixed blocks of
// rows or columns of C, one single-threaded library call each, TBB across
// the blocks. The blocks are a function of the shape and the machine's core
// count alone, so results do not depend on how many threads run them (a GEMM
// library's result for an element does depend on how the call is cut).
#pragma once

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "gemm.h"

namespace dscore::transformer::cpu {

// Below this many multiply-adds a split costs more than it gains.
constexpr int64_t kGemmSerialWork = int64_t{1} << 18;
// Each block's call packs the whole other operand again, so blocks are
// large. A machine with many cores gets at least four blocks of at most 256
// rows (at least 64); one with few cores gets one block per core, up to 1024
// rows, where fewer, larger blocks pack less. Measured on the GPT's shapes:
// on 2 cores (AVX-512) two 1024-row blocks ran about 10% faster than eight
// of 256; on AVX2, 256-row blocks had run 5-15% faster than 128. The count
// comes from the machine's cores, not from the threads this rank may use,
// so a result depends on the shape and the machine (as it does on the
// machine's ISA), never on the thread budget or the ranks sharing the cores.
constexpr int64_t kGemmMinBlock = 64;
constexpr int64_t kGemmManyCoreMaxBlock = 256;
constexpr int64_t kGemmMaxBlock = 1024;
inline int64_t gemm_machine_cores() {
  static const int64_t cores =
      std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return cores;
}
inline int64_t gemm_block_for(int64_t extent) {
  const auto share = [extent](int64_t parts) {
    return ((extent + parts - 1) / parts + 31) / 32 * 32;
  };
  const int64_t many_core = std::clamp(share(4), kGemmMinBlock, kGemmManyCoreMaxBlock);
  return std::max(many_core, std::min(share(gemm_machine_cores()), kGemmMaxBlock));
}

// call(m, n, a, b, c) for each block of C = op(A) op(B) (m x n, inner k):
// the block's rows and columns and where its operands and result start.
// Row i of op(A) starts at a + i*lda (untransposed) or a + i (transposed);
// likewise column j of op(B).
//
// Blocks of rows are whole rows of C, dense when ldc is n; blocks of
// columns are strided. prefer_rows cuts rows wherever there are at least
// two blocks' worth of them and B is not large (every block of rows reads
// all of B), for a library whose fast kernel needs a dense C (oneDNN's AMX
// one); otherwise the longer side of C is cut.
constexpr int64_t kGemmRowsLargestB = int64_t{1} << 22;  // elements
template <typename In, typename Out, typename Call>
void gemm_in_blocks(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const In* a, int64_t lda,
                    const In* b, int64_t ldb, Out* c, int64_t ldc, Call&& call,
                    bool prefer_rows = false) {
  if (m <= 0 || n <= 0) return;
  if (m * n * k < kGemmSerialWork || (m <= kGemmMinBlock && n <= kGemmMinBlock)) {
    call(m, n, a, b, c);
    return;
  }
  if (m >= n || (prefer_rows && m >= 2 * kGemmMinBlock && n * k <= kGemmRowsLargestB)) {
    const int64_t block = gemm_block_for(m);
    tbb::parallel_for(int64_t{0}, (m + block - 1) / block, [&](int64_t blk) {
      const int64_t i0 = blk * block, rows = std::min(block, m - i0);
      call(rows, n, op_a == Op::kNone ? a + i0 * lda : a + i0, b, c + i0 * ldc);
    });
  } else {
    const int64_t block = gemm_block_for(n);
    tbb::parallel_for(int64_t{0}, (n + block - 1) / block, [&](int64_t blk) {
      const int64_t j0 = blk * block, cols = std::min(block, n - j0);
      call(m, cols, a, op_b == Op::kNone ? b + j0 : b + j0 * ldb, c + j0);
    });
  }
}

}  // namespace dscore::transformer::cpu
