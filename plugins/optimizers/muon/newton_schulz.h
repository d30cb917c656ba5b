// Muon's orthogonalization: the quintic Newton-Schulz iteration DeepSpeed
// 0.19 runs (runtime/zero/muon/original_muon.py), five steps with
// coefficients (3.4445, -4.7750, 2.0315), as
//  - kGram: zeropower_via_gram_newtonschulz, which iterates on the small
//    Gram matrix X X^T (restarting at step 2) and runs in fp16, after
//    normalising in fp32;
//  - kStandard: zeropower_via_newtonschulz5, in bf16 throughout.
// DeepSpeed picks those dtypes where the accelerator has them (every GPU)
// here each operation is computed in fp32 (the GEMMs with fp32 sums, as
// the accelerators' half-precision GEMMs accumulate) and its result rounded
// to the method's dtype, so the same iterates come out on any processor.
#pragma once

#include <cstdint>

namespace dscore::muon {

enum class NsMethod { kGram, kStandard };

// `v` as the method's dtype holds it (fp16 for kGram, bf16 for kStandard).
float round_to_method(NsMethod method, float v);

// x: rows x cols, row-major; replaced by its orthogonalization (values
// exactly representable in the method's dtype).
void orthogonalize(NsMethod method, int64_t rows, int64_t cols, float* x);

}  // namespace dscore::muon
