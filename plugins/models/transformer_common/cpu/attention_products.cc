#include "attention_products.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "gemm_bf16.h"

namespace dscore::transformer::cpu {
namespace {

void add_into(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace

OneDnnProducts::OneDnnProducts(const AttentionShape& shape, const uint16_t* k16,
                               const uint16_t* v16)
    : k16_(k16), v16_(v16), head_elements_(shape.Tn * shape.head_dim), hs_(shape.head_dim) {}

void OneDnnProducts::scores(int64_t bg, const uint16_t* q_rows, int64_t rows, int64_t keys,
                            float scale, float* s) const {
  gemm_bf16_serial(Op::kNone, Op::kTranspose, rows, keys, hs_, scale, q_rows, hs_,
                   k16_ + bg * head_elements_, hs_, 0.0f, s, keys);
}

void OneDnnProducts::outputs(int64_t bg, const uint16_t* p16, int64_t rows, int64_t keys,
                             float* o) const {
  gemm_bf16_serial(Op::kNone, Op::kNone, rows, hs_, keys, 1.0f, p16, keys,
                   v16_ + bg * head_elements_, hs_, 0.0f, o, hs_);
}

OneDnnProducts::Group::Group(const uint16_t* k16, const uint16_t* v16, int64_t, int64_t hs,
                             float* tmp)
    : k16_(k16), v16_(v16), hs_(hs), tmp_(tmp) {}

void OneDnnProducts::Group::scores(const uint16_t* q_rows, int64_t rows, int64_t keys, float scale,
                                   float* p) const {
  gemm_bf16_serial(Op::kNone, Op::kTranspose, rows, keys, hs_, scale, q_rows, hs_, k16_, hs_, 0.0f,
                   p, keys);
}

void OneDnnProducts::Group::output_grads(const uint16_t* dy_rows, int64_t rows, int64_t keys,
                                         float* dp) const {
  gemm_bf16_serial(Op::kNone, Op::kTranspose, rows, keys, hs_, 1.0f, dy_rows, hs_, v16_, hs_, 0.0f,
                   dp, keys);
}

// Each product writes its own rows (beta 0: oneDNN's AMX kernel), added
// into the sums or copied into dq's rows here.
void OneDnnProducts::Group::add_value_grads(const uint16_t* p16, const uint16_t* dy_rows,
                                            int64_t rows, int64_t keys, float* dv_acc) const {
  gemm_bf16_serial(Op::kTranspose, Op::kNone, keys, hs_, rows, 1.0f, p16, keys, dy_rows, hs_, 0.0f,
                   tmp_, hs_);
  add_into(dv_acc, tmp_, keys * hs_);
}

void OneDnnProducts::Group::query_grads(const uint16_t* ds16, int64_t rows, int64_t keys,
                                        float scale, float* dq, int64_t ld) const {
  gemm_bf16_serial(Op::kNone, Op::kNone, rows, hs_, keys, scale, ds16, keys, k16_, hs_, 0.0f, tmp_,
                   hs_);
  for (int64_t r = 0; r < rows; ++r) std::copy(tmp_ + r * hs_, tmp_ + (r + 1) * hs_, dq + r * ld);
}

void OneDnnProducts::Group::add_key_grads(const uint16_t* ds16, const uint16_t* q_rows,
                                          int64_t rows, int64_t keys, float scale,
                                          float* dk_acc) const {
  gemm_bf16_serial(Op::kTranspose, Op::kNone, keys, hs_, rows, scale, ds16, keys, q_rows, hs_, 0.0f,
                   tmp_, hs_);
  add_into(dk_acc, tmp_, keys * hs_);
}

namespace {

// A block's A operand, copied on its thread (the storage is kept).
AmxA& block_operand() {
  thread_local AmxA a;
  return a;
}
// A block's B operand (dY_i or Q_i for the key and value gradients).
AmxB& block_b_operand() {
  thread_local AmxB b;
  return b;
}

}  // namespace

AmxProducts::AmxProducts(const AttentionShape& shape, const uint16_t* k16, const uint16_t* v16)
    : hs_(shape.head_dim) {
  const int64_t groups = shape.B * shape.NKV, Tn = shape.Tn, hs = shape.head_dim;
  thread_local std::vector<AmxB> own_keys_t, own_values;
  // The calling thread's copies, named here: inside the tasks below the
  // thread_local names would be each worker's own.
  std::vector<AmxB>& keys_t = own_keys_t;
  std::vector<AmxB>& values = own_values;
  if (keys_t.size() < static_cast<size_t>(groups)) {
    keys_t.resize(static_cast<size_t>(groups));
    values.resize(static_cast<size_t>(groups));
  }
  tbb::parallel_for(int64_t{0}, groups, [&](int64_t bg) {
    keys_t[bg].pack(Op::kTranspose, hs, Tn, k16 + bg * Tn * hs, hs);
    values[bg].pack(Op::kNone, Tn, hs, v16 + bg * Tn * hs, hs);
  });
  keys_t_ = &keys_t;
  values_ = &values;
}

void AmxProducts::scores(int64_t bg, const uint16_t* q_rows, int64_t rows, int64_t keys,
                         float scale, float* s) const {
  AmxA& q = block_operand();
  q.use(rows, hs_, q_rows, hs_);
  amx_gemm_part(q, (*keys_t_)[bg], keys, scale, 0.0f, s, keys);
}

void AmxProducts::outputs(int64_t bg, const uint16_t* p16, int64_t rows, int64_t keys,
                          float* o) const {
  AmxA& p = block_operand();
  p.use(rows, keys, p16, keys);
  amx_gemm_part(p, (*values_)[bg], hs_, 1.0f, 0.0f, o, hs_);
}

uint64_t AmxProducts::forward_bytes(const AttentionShape& s) {
  const int64_t Tn = s.Tn, hs = s.head_dim;
  return static_cast<uint64_t>(s.B * s.NKV) * (amx_b_bytes(hs, Tn) + amx_b_bytes(Tn, hs));
}

AmxProducts::Group::Group(const uint16_t* k16, const uint16_t* v16, int64_t Tn, int64_t hs, float*)
    : hs_(hs) {
  thread_local AmxB keys_t, values_t, keys;
  keys_t.pack(Op::kTranspose, hs, Tn, k16, hs);
  values_t.pack(Op::kTranspose, hs, Tn, v16, hs);
  keys.pack(Op::kNone, Tn, hs, k16, hs);
  keys_t_ = &keys_t;
  values_t_ = &values_t;
  keys_ = &keys;
}

void AmxProducts::Group::scores(const uint16_t* q_rows, int64_t rows, int64_t keys, float scale,
                                float* p) const {
  AmxA& q = block_operand();
  q.use(rows, hs_, q_rows, hs_);
  amx_gemm_part(q, *keys_t_, keys, scale, 0.0f, p, keys);
}

void AmxProducts::Group::output_grads(const uint16_t* dy_rows, int64_t rows, int64_t keys,
                                      float* dp) const {
  AmxA& dy = block_operand();
  dy.use(rows, hs_, dy_rows, hs_);
  amx_gemm_part(dy, *values_t_, keys, 1.0f, 0.0f, dp, keys);
}

void AmxProducts::Group::add_value_grads(const uint16_t* p16, const uint16_t* dy_rows, int64_t rows,
                                         int64_t keys, float* dv_acc) const {
  AmxA& p_t = block_operand();
  AmxB& dy = block_b_operand();
  p_t.pack(Op::kTranspose, keys, rows, p16, keys);
  dy.pack(Op::kNone, rows, hs_, dy_rows, hs_);
  amx_gemm(p_t, dy, 1.0f, 1.0f, dv_acc, hs_);
}

void AmxProducts::Group::query_grads(const uint16_t* ds16, int64_t rows, int64_t keys, float scale,
                                     float* dq, int64_t ld) const {
  AmxA& ds = block_operand();
  ds.use(rows, keys, ds16, keys);
  amx_gemm_part(ds, *keys_, hs_, scale, 0.0f, dq, ld);
}

void AmxProducts::Group::add_key_grads(const uint16_t* ds16, const uint16_t* q_rows, int64_t rows,
                                       int64_t keys, float scale, float* dk_acc) const {
  AmxA& ds_t = block_operand();
  AmxB& q = block_b_operand();
  ds_t.pack(Op::kTranspose, keys, rows, ds16, keys);
  q.pack(Op::kNone, rows, hs_, q_rows, hs_);
  amx_gemm(ds_t, q, scale, 1.0f, dk_acc, hs_);
}

uint64_t AmxProducts::group_bytes(int64_t Tn, int64_t hs) {
  const int64_t rows = kAttentionQueryBlock;
  // K^T, V^T and K; a block's A (at most Tn x rows or rows x Tn) and B.
  return 2 * amx_b_bytes(hs, Tn) + amx_b_bytes(Tn, hs) +
         std::max(amx_a_bytes(Tn, rows), amx_a_bytes(rows, Tn)) + amx_b_bytes(rows, hs);
}

}  // namespace dscore::transformer::cpu
