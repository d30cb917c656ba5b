// keep_freed_memory_in_process: with the policy on, a large block comes
// from the heap rather than its own mapping, and freeing it leaves the
// memory in the process, where the next block of that size finds it.
#include "core/base/process_heap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dscore {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;  // the sanitizers bring their own allocator
#elif defined(__GLIBC__)
constexpr bool kGlibcMalloc = true;
#else
constexpr bool kGlibcMalloc = false;
#endif

TEST(ProcessHeap, TheEnvironmentChoosesThePolicy) {
  ::unsetenv("DSCORE_MALLOC");
  ASSERT_TRUE(heap_policy_from_env().ok());
  EXPECT_EQ(*heap_policy_from_env(), HeapPolicy::kKeepFreed);
  ::setenv("DSCORE_MALLOC", "keep", 1);
  EXPECT_EQ(*heap_policy_from_env(), HeapPolicy::kKeepFreed);
  ::setenv("DSCORE_MALLOC", "system", 1);
  EXPECT_EQ(*heap_policy_from_env(), HeapPolicy::kSystem);
  ::setenv("DSCORE_MALLOC", "jemalloc", 1);
  const Result<HeapPolicy> wrong = heap_policy_from_env();
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("DSCORE_MALLOC=\"jemalloc\""), std::string::npos);
  EXPECT_NE(wrong.status().message().find("\"system\""), std::string::npos);
  EXPECT_FALSE(apply_heap_policy_from_env().ok());
  ::setenv("DSCORE_MALLOC", "system", 1);
  ASSERT_TRUE(apply_heap_policy_from_env().ok());
  EXPECT_FALSE(*apply_heap_policy_from_env()) << "system's defaults are not the kept heap";
  ::unsetenv("DSCORE_MALLOC");
}

TEST(ProcessHeap, AFreedLargeBlockStaysInTheProcess) {
  if (!kGlibcMalloc) GTEST_SKIP() << "glibc's malloc only";
#if defined(__GLIBC__)
  ASSERT_TRUE(keep_freed_memory_in_process());
  constexpr size_t kBytes = size_t{96} << 20;  // above glibc's largest mmap threshold (32 MiB)
  const size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "the block got its own mapping";
  const size_t heap_with_block = mallinfo2().arena;
  EXPECT_GE(heap_with_block, kBytes);
  std::free(block);
  EXPECT_EQ(mallinfo2().arena, heap_with_block) << "the heap was trimmed";
  EXPECT_GE(mallinfo2().fordblks, kBytes) << "the freed block is not free in the heap";
  void* again = std::malloc(kBytes);
  EXPECT_EQ(mallinfo2().arena, heap_with_block) << "the same size needed more heap";
  std::free(again);
#endif
}

}  // namespace
}  // namespace dscore
