// Function attributes that compile one function for a wider ISA than the
// build's baseline (x86-64), for kernels chosen at run time by
// vector_isa() (vector_math.h). A function marked always_inline and
// written without intrinsics takes on the ISA of the function it is
// inlined into, so one generic body can be compiled once per ISA.
#pragma once

#define DSCORE_AVX2 __attribute__((target("avx2,fma")))
#define DSCORE_AVX512 __attribute__((target("avx512f")))
#define DSCORE_ALWAYS_INLINE inline __attribute__((always_inline))
#define DSCORE_LAMBDA_INLINE __attribute__((always_inline))  // after a lambda's parameters
