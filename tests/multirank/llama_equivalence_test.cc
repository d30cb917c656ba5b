// The ZeRO equivalence invariant with the llama model, real ranks under
// mpirun on the quickstart corpus: an untied Llama with grouped-query
// attention, whose LM head's gradient is committed inside the final
// layer's backward turn (and a tied one, which comes back to its embedding
// layer as gpt does).
//  - Bitwise: stages 0-3 at two ranks (fp32, gas 1, clipping active),
//    also stage 2 with one bucket buffer, and activation checkpointing on
//    vs off.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/multirank/equivalence_checks.h"
#include "tests/multirank/harness.h"

namespace dscore::testing {
namespace {

RunSpec llama_spec(bool tied) {
  RunSpec spec;
  spec.model = std::string(R"({"type": "llama", "vocab_size": 256, "hidden_size": 32,
      "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "max_position_embeddings": 16, "block_size": 16,
      "tie_word_embeddings": )") +
               (tied ? "true" : "false") + "}";
  spec.extra = std::string(R"("data": {"type": "text", "path": ")") + DSCORE_SOURCE_DIR +
               R"(/configs/data/quickstart.txt"})";
  spec.train_batch = 8;
  spec.steps = 6;
  spec.reduce_bucket_size = 3000;  // several buckets per backward
  spec.persistence_threshold = 40;
  spec.prefetch_bucket_size = 4000;
  spec.clipping = 0.05;
  return spec;
}

TEST(LlamaZeroEquivalence, StagesAreBitwiseEqualAtTwoRanks) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    RunSpec spec = llama_spec(tied);
    std::vector<RunResult> runs;
    for (int stage = 0; stage <= 3; ++stage) {
      spec.stage = stage;
      runs.push_back(run_ok(spec, "stage " + std::to_string(stage)));
    }
    for (int stage = 1; stage <= 3; ++stage)
      expect_bitwise(runs[static_cast<size_t>(stage)], runs[0],
                     "stage " + std::to_string(stage) + " vs 0");
    spec.stage = 2;
    spec.overlap_comm = false;
    expect_bitwise(run_ok(spec, "stage 2, overlap_comm off"), runs[0],
                   "stage 2 one buffer vs stage 0");
  }
}

TEST(LlamaZeroEquivalence, ActivationCheckpointingChangesNothingButMemory) {
  RunSpec spec = llama_spec(false);
  spec.stage = 3;
  RunResult plain = run_ok(spec, "without checkpointing");
  spec.extra += R"(, "activation_checkpointing": {"number_checkpoints": 1})";
  expect_bitwise(run_ok(spec, "first block checkpointed"), plain, "number_checkpoints 1 vs off");
}

}  // namespace
}  // namespace dscore::testing
