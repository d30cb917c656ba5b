// The bf16 attention's products (attention_bf16.cc), on one of two kernels
// with one interface, so the attention's blocks and row work are written
// once: oneDNN's matmul (OneDnnProducts: every CPU with the bf16 GEMM) and
// dscore's AMX tiles (AmxProducts, amx_gemm.h: where the CPU has AMX),
// which copy a head group's keys and values into the tiles' layouts once
// for all its query blocks, add dk and dv into their sums inside the
// product and write dq's rows in place.
//
// Operands: q16, k16, v16 and dy16 are dense (Tn, hs) bf16 heads; a query
// block is `rows` rows from i0, meeting keys = i0 + rows keys; p16 and
// ds16 are (rows, keys). Results are fp32. Forward products are called
// from many threads at once (each with its own block); a backward Group is
// one task's.
#pragma once

#include <cstdint>
#include <vector>

#include "aligned.h"
#include "amx_gemm.h"
#include "attention.h"

namespace dscore::transformer::cpu {

class OneDnnProducts {
 public:
  // The forward's products for every (batch, kv head) group's k16 and v16
  // (group bg's at k16 + bg * Tn * hs).
  OneDnnProducts(const AttentionShape& shape, const uint16_t* k16, const uint16_t* v16);
  // s (rows, keys) = scale q_i K^T; o (rows, hs) = P V.
  void scores(int64_t bg, const uint16_t* q_rows, int64_t rows, int64_t keys, float scale,
              float* s) const;
  void outputs(int64_t bg, const uint16_t* p16, int64_t rows, int64_t keys, float* o) const;

  // One backward task's products against a group's k16 and v16. tmp: (Tn,
  // hs) fp32 of the task's, for results added or copied after the product.
  class Group {
   public:
    Group(const uint16_t* k16, const uint16_t* v16, int64_t Tn, int64_t hs, float* tmp);
    void scores(const uint16_t* q_rows, int64_t rows, int64_t keys, float scale, float* p) const;
    // dp (rows, keys) = dY_i V^T.
    void output_grads(const uint16_t* dy_rows, int64_t rows, int64_t keys, float* dp) const;
    // dv_acc (keys, hs) += P^T dY_i; dq rows (ld) = scale dS K; dk_acc += scale dS^T Q_i.
    void add_value_grads(const uint16_t* p16, const uint16_t* dy_rows, int64_t rows, int64_t keys,
                         float* dv_acc) const;
    void query_grads(const uint16_t* ds16, int64_t rows, int64_t keys, float scale, float* dq,
                     int64_t ld) const;
    void add_key_grads(const uint16_t* ds16, const uint16_t* q_rows, int64_t rows, int64_t keys,
                       float scale, float* dk_acc) const;

   private:
    const uint16_t *k16_, *v16_;
    int64_t hs_;
    float* tmp_;
  };

 private:
  const uint16_t *k16_, *v16_;
  int64_t head_elements_, hs_;
};

class AmxProducts {
 public:
  // Copies every group's K^T and V into the tiles' layouts (over TBB);
  // they are kept on the calling thread from call to call.
  AmxProducts(const AttentionShape& shape, const uint16_t* k16, const uint16_t* v16);
  void scores(int64_t bg, const uint16_t* q_rows, int64_t rows, int64_t keys, float scale,
              float* s) const;
  void outputs(int64_t bg, const uint16_t* p16, int64_t rows, int64_t keys, float* o) const;

  class Group {
   public:
    // Copies K^T, V^T and K (kept on the calling thread). tmp is unused.
    Group(const uint16_t* k16, const uint16_t* v16, int64_t Tn, int64_t hs, float* tmp);
    void scores(const uint16_t* q_rows, int64_t rows, int64_t keys, float scale, float* p) const;
    void output_grads(const uint16_t* dy_rows, int64_t rows, int64_t keys, float* dp) const;
    void add_value_grads(const uint16_t* p16, const uint16_t* dy_rows, int64_t rows, int64_t keys,
                         float* dv_acc) const;
    void query_grads(const uint16_t* ds16, int64_t rows, int64_t keys, float scale, float* dq,
                     int64_t ld) const;
    void add_key_grads(const uint16_t* ds16, const uint16_t* q_rows, int64_t rows, int64_t keys,
                       float scale, float* dk_acc) const;

   private:
    int64_t hs_;
    AmxB *keys_t_, *values_t_, *keys_;
  };

  // The forward's copies of every group's K^T and V; one task's (thread's)
  // copies of K^T, V^T and K and its blocks' operands.
  static uint64_t forward_bytes(const AttentionShape& shape);
  static uint64_t group_bytes(int64_t Tn, int64_t hs);

 private:
  int64_t hs_;
  const std::vector<AmxB>* keys_t_;
  const std::vector<AmxB>* values_;
};

}  // namespace dscore::transformer::cpu
