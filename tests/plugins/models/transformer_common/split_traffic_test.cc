// What a split transformer's own collectives move per micro-batch through
// a stage's layers (split_traffic.h; the whole model's counts are held
// against the comms logger's in tests/core/cli/tensor_parallel_run_test.cc):
// the embedding's sum on the stage holding layer 0, the head's on the stage
// ending the model, 4 sums a block (5 recomputed), and Ulysses' exchanges
// per block and pass.
#include <gtest/gtest.h>

#include "transformer_common/split_traffic.h"

namespace dscore::transformer {
namespace {

dscore_pipeline_stage layers(size_t first, size_t end) {
  return dscore_pipeline_stage{sizeof(dscore_pipeline_stage), first, end};
}

// 4 blocks (layers 1-4; the head is layer 5), 10 rows of 8, fp32.
SplitTraffic four_blocks() {
  SplitTraffic t;
  t.rows = 10;
  t.embd = 8;
  t.blocks = 4;
  t.to_heads = {24};
  t.to_tokens = {8};
  t.head_rows_per_block = 4;  // blocks of 4, 4 and 2 rows
  return t;
}

TEST(SplitTraffic, TensorParallelSumsPerStage) {
  SplitTraffic t = four_blocks();
  t.tp_size = 2;
  const uint64_t activation = 10 * 8 * 4;
  // The first stage: the embedding and blocks 1-2.
  dscore_model_collectives c = split_collectives(t, layers(0, 3));
  EXPECT_EQ(c.tensor_parallel_calls, 2u * 4 + 1);
  EXPECT_EQ(c.tensor_parallel_bytes, (2u * 4 + 1) * activation);
  EXPECT_EQ(c.sequence_parallel_calls, 0u);
  // The last: blocks 3-4 and the head (3 blocks of rows, 2 statistics each).
  c = split_collectives(t, layers(3, 6));
  EXPECT_EQ(c.tensor_parallel_calls, 2u * 4 + 3 * 2 + 1);
  EXPECT_EQ(c.tensor_parallel_bytes, (2u * 4 + 1) * activation + 24u * 10);
  // Recomputed blocks sum their attention projection again: all 4, or the
  // first 3 (number_checkpoints), of which the stage of blocks 3-4 holds 1.
  t.checkpoint_blocks = 4;
  EXPECT_EQ(split_collectives(t, layers(1, 5)).tensor_parallel_calls, 4u * 5);
  t.checkpoint_blocks = 3;
  EXPECT_EQ(split_collectives(t, layers(3, 5)).tensor_parallel_calls, 2u * 4 + 1);
  t.checkpoint_blocks = 0;
  // Unsplit: nothing.
  t.tp_size = 1;
  EXPECT_EQ(split_collectives(t, layers(0, 6)).tensor_parallel_calls, 0u);
}

TEST(SplitTraffic, SequenceParallelExchangesPerBlockAndPass) {
  SplitTraffic t = four_blocks();
  t.sp_size = 2;
  const dscore_model_collectives c = split_collectives(t, layers(0, 6));
  EXPECT_EQ(c.tensor_parallel_calls, 0u);
  EXPECT_EQ(c.sequence_parallel_calls, 4u * 2 * 2);
  EXPECT_EQ(c.sequence_parallel_bytes, 4u * 2 * (24 + 8) * 10 * 4);
  t.checkpoint_blocks = 4;
  const dscore_model_collectives recomputed = split_collectives(t, layers(2, 4));
  EXPECT_EQ(recomputed.sequence_parallel_calls, 2u * 3 * 2);
  EXPECT_EQ(split_collectives(t, layers(5, 6)).sequence_parallel_calls, 0u);  // the head
}

}  // namespace
}  // namespace dscore::transformer
