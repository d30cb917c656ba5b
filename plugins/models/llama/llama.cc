// The built-in "llama" model: a Llama-family decoder as transformers'
// LlamaForCausalLM (token embedding, pre-RMSNorm blocks of grouped-query
// causal self-attention with rotary embeddings and a SwiGLU MLP, final
// RMSNorm, LM head tied to the embedding or not, no biases,
// cross-entropy), forward and backward by hand through the hooks of
// model.h, on the CPU or, in CUDA builds, the GPU. The same model is
// Mixtral and Qwen2/Qwen3 (with or without MoE blocks: moe_mlp.h) on the
// CPU (LlamaConfig::architecture).
// Input "tokens": (B, block_size + 1) int32; forward()'s output is the
// logits (B, vocab_size) fp32 at each sample's last non-padding position.
#include <dscore/model.h>
#include <dscore/cpp/model_plugin.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "../transformer_common/cpu/linear.h"
#include "../transformer_common/cpu/view_scratch.h"
#include "../transformer_common/cuda_module.h"
#include "../transformer_common/model_io.h"
#include "../transformer_common/moe/expert_traffic.h"
#include "../transformer_common/pass_memory.h"
#include "../transformer_common/split_traffic.h"
#include "../transformer_common/tokens.h"
#include "compute.h"
#include "llama_config_reader.h"
#include "llama_hf.h"
#include "llama_params.h"
#include "runner.h"

namespace dscore::llama {
namespace {

using sdk::Error;

constexpr const char kParamsSchema[] = R"json({
  "from_pretrained": {"type": "string", "default": "",
      "doc": "a Hugging Face Llama folder (config.json and model.safetensors or its shards): the hyperparameters come from its config.json and the weights from its safetensors, each rank reading the slices it owns; leave the architecture keys below unset"},
  "vocab_size": {"type": "int", "default": 32000, "min": 1, "doc": "token ids are 0 .. vocab_size-1"},
  "hidden_size": {"type": "int", "default": 4096, "min": 1, "doc": "model width C"},
  "intermediate_size": {"type": "int", "default": 11008, "min": 1, "doc": "the SwiGLU MLP's width"},
  "num_hidden_layers": {"type": "int", "default": 32, "min": 1, "doc": "transformer blocks"},
  "num_attention_heads": {"type": "int", "default": 32, "min": 1, "doc": "query heads"},
  "num_key_value_heads": {"type": "int", "default": -1, "min": -1,
      "doc": "key/value heads (grouped-query attention; must divide num_attention_heads); -1 = num_attention_heads"},
  "head_dim": {"type": "int", "default": -1, "min": -1,
      "doc": "channels per head (even); -1 = hidden_size / num_attention_heads"},
  "max_position_embeddings": {"type": "int", "default": 2048, "min": 1,
      "doc": "the longest context the model is meant for (block_size may not exceed it)"},
  "block_size": {"type": "int", "default": -1, "min": -1,
      "doc": "context length T of a training sample (each is T + 1 tokens); -1 = max_position_embeddings"},
  "rms_norm_eps": {"type": "number", "default": 1e-6, "doc": "RMSNorm's epsilon"},
  "rope_theta": {"type": "number", "default": 10000.0, "doc": "rotary embeddings' base"},
  "rope_scaling": {"type": "json",
      "doc": "null (absent) or Llama 3's {\"rope_type\": \"llama3\", \"factor\", \"low_freq_factor\", \"high_freq_factor\", \"original_max_position_embeddings\"}"},
  "tie_word_embeddings": {"type": "bool", "default": false,
      "doc": "the LM head reuses model.embed_tokens.weight (no lm_head.weight)"},
  "initializer_range": {"type": "number", "default": 0.02, "min": 0,
      "doc": "standard deviation of the initial linear and embedding weights"},
  "hidden_act": {"type": "string", "default": "silu", "doc": "only \"silu\" (SwiGLU)"},
  "num_local_experts": {"type": "int", "default": 0, "min": 0,
      "doc": "Mixture of Experts as Mixtral (docs/moe.md): experts per block, each a SwiGLU MLP of intermediate_size; 0 = a dense Llama"},
  "num_experts_per_tok": {"type": "int", "default": 2, "min": 1,
      "doc": "experts each token is routed to (top-k of the router's softmax, renormalised; every route kept)"},
  "architecture": {"type": "string", "default": "auto", "enum": ["auto", "llama", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"],
      "doc": "the transformers architecture (its parameter names and export-hf's config.json; qwen2 and qwen2_moe add q, k and v biases, qwen3 and qwen3_moe q_norm and k_norm); auto: mixtral with experts, else llama"},
  "shared_expert_intermediate_size": {"type": "int", "default": 0, "min": 0,
      "doc": "Qwen2-MoE: a shared SwiGLU expert of this width beside the routed ones, scaled by a sigmoid gate; 0 = none"},
  "moe_intermediate_size": {"type": "int", "default": 0, "min": 0,
      "doc": "each expert's SwiGLU width (Qwen-MoE); 0 = intermediate_size (Mixtral)"},
  "norm_topk_prob": {"type": "bool", "default": true,
      "doc": "renormalise the k routes' probabilities to sum to 1 (Mixtral: always)"},
  "decoder_sparse_step": {"type": "int", "default": 1, "min": 1,
      "doc": "block l (from 0) is an MoE block when (l + 1) % decoder_sparse_step == 0 (Qwen-MoE)"},
  "mlp_only_layers": {"type": "json",
      "doc": "a list of blocks (from 0) that keep a dense MLP (Qwen-MoE); null = none"},
  "router_aux_loss_coef": {"type": "number", "default": -1, "min": -1,
      "doc": "the load-balancing loss's coefficient (with output_router_logits); -1 = a from_pretrained folder's, else 0.001"},
  "output_router_logits": {"type": "bool", "default": false,
      "doc": "add router_aux_loss_coef times transformers' load_balancing_loss_func to the loss (as MixtralForCausalLM does when set); true here overrules a from_pretrained folder's false"},
  "router_jitter_noise": {"type": "number", "default": 0.0, "min": 0,
      "doc": "must be 0: Mixtral's training-time jitter of the MoE input is not implemented"},
  "attention_bias": {"type": "bool", "default": false, "doc": "must be false: no biases"},
  "mlp_bias": {"type": "bool", "default": false, "doc": "must be false: no biases"},
  "checkpoint_activations": {"type": "bool", "default": false,
      "doc": "recompute block activations in backward (set by the config's activation_checkpointing section)"},
  "number_checkpoints": {"type": "int", "default": -1, "min": -1,
      "doc": "how many blocks (the first ones) are checkpointed; -1 = all"},
  "device": {"type": "string", "default": "cpu", "enum": ["cpu", "cuda"],
             "doc": "where forward and backward run (cuda needs a CUDA build and a GPU)"},
  "cuda_dtype": {"type": "string", "default": "bf16", "enum": ["bf16", "fp32"],
                 "doc": "activation and matmul type on CUDA (fp32 accumulation either way)"},
  "tensor_parallel_size": {"type": "int", "default": 1, "min": 1,
      "doc": "ranks each layer is split over (set by the engine from tensor_parallel.autotp_size)"},
  "tensor_parallel_rank": {"type": "int", "default": 0, "min": 0,
      "doc": "this rank's part (set by the engine for each rank)"},
  "sequence_parallel_size": {"type": "int", "default": 1, "min": 1,
      "doc": "ranks each sample's sequence is split over (Ulysses; set by the engine from sequence_parallel_size)"},
  "sequence_parallel_rank": {"type": "int", "default": 0, "min": 0,
      "doc": "this rank's slice of the sequence (set by the engine for each rank)"},
  "expert_parallel_size": {"type": "int", "default": 1, "min": 1,
      "doc": "ranks each MoE block's experts are spread over (set by the engine from expert_parallel.autoep_size)"},
  "expert_parallel_rank": {"type": "int", "default": 0, "min": 0,
      "doc": "this rank's share of the experts (set by the engine for each rank)"}
})json";

// The architecture keys of the model section: with from_pretrained they
// come from config.json, so a section that sets one (to other than its
// default) is refused rather than silently overruled.
void refuse_architecture_keys(const sdk::Params& p, const std::string& dir) {
  const std::pair<const char*, double> defaults[] = {{"vocab_size", 32000},
                                                     {"hidden_size", 4096},
                                                     {"intermediate_size", 11008},
                                                     {"num_hidden_layers", 32},
                                                     {"num_attention_heads", 32},
                                                     {"num_key_value_heads", -1},
                                                     {"head_dim", -1},
                                                     {"max_position_embeddings", 2048},
                                                     {"rms_norm_eps", 1e-6},
                                                     {"rope_theta", 10000.0},
                                                     {"initializer_range", 0.02},
                                                     {"num_local_experts", 0},
                                                     {"num_experts_per_tok", 2},
                                                     {"moe_intermediate_size", 0},
                                                     {"decoder_sparse_step", 1},
                                                     {"shared_expert_intermediate_size", 0}};
  for (const auto& [key, fallback] : defaults)
    if (p.number(key) != fallback)
      throw Error(DSCORE_INVALID_ARGUMENT, std::string("llama: the model section sets \"") + key +
                                               "\" and \"from_pretrained\": " + dir +
                                               "; the architecture comes from " + dir +
                                               "/config.json: remove \"" + key +
                                               "\" (block_size, device and activation "
                                               "checkpointing stay in the model section)");
  const auto set = [&](const char* key) {
    const dscore_named_value* v = p.find(key);
    return v != nullptr && v->type != DSCORE_VALUE_NULL;
  };
  if (p.boolean("tie_word_embeddings") || set("rope_scaling") || set("mlp_only_layers") ||
      !p.boolean("norm_topk_prob") || p.string("architecture") != "auto")
    throw Error(DSCORE_INVALID_ARGUMENT,
                "llama: tie_word_embeddings, rope_scaling, architecture, norm_topk_prob and "
                "mlp_only_layers come from " +
                    dir +
                    "/config.json with \"from_pretrained\": remove them from the model section");
}

// The model's configuration and, with from_pretrained, its folder.
struct Source {
  std::shared_ptr<const hf::HfFolder> folder;
  LlamaConfig config;
};

Source read_source(const sdk::Params& p) {
  const std::string dir = p.string("from_pretrained");
  if (dir.empty()) return {nullptr, read_config(p)};
  refuse_architecture_keys(p, dir);
  Source out;
  out.folder = hf::HfFolder::open(dir);
  out.config = finish_config(llama_hf_settings(out.folder->config()), p);
  return out;
}

class Llama : public sdk::Instance {
 public:
  Llama(sdk::HostRef host, const sdk::Params& p) : Llama(host, read_source(p), p) {}

  Llama(sdk::HostRef host, Source source, const sdk::Params& p)
      : Instance(host), config_(source.config), params_(config_, p.args()->seed) {
    if (config_.device != "cuda")
      compute_ = make_cpu_compute(config_, params_, host);
    else if (p.describe_only())
      compute_ = std::make_unique<transformer::DescribeOnlyCompute>("llama");
    else
      compute_ = transformer::plugin_cuda_compute("llama", kCudaModuleFile, kCudaFactorySymbol,
                                                  config_, params_);
    if (source.folder)
      weights_ = std::make_unique<LlamaWeights>(std::move(source.folder), params_.description());
  }

  const dscore_model_description* description() const { return &params_.description(); }

  void init_param(size_t index, int64_t offset, int64_t count, dscore_tensor* out) const {
    float* data = transformer::init_param_output(
        index, params_.param_count(), index < params_.param_count() ? params_.numel(index) : 0,
        offset, count, out);
    if (weights_) {
      // A tensor-parallel rank reads only its part, run by run.
      const dscore_model_param& p = *param_at(index);
      sdk::for_each_whole_run(p, offset, count, [&](int64_t local, int64_t whole, int64_t n) {
        weights_->read(p, whole, n, data + (local - offset));
      });
    } else {
      params_.init(index, offset, count, data);
    }
  }

  // Hugging Face: dscore's names and layouts are LlamaForCausalLM's.
  dscore_hf_tensor hf_tensor(size_t index) const {
    return {sizeof(dscore_hf_tensor), param_at(index)->name, 0};
  }
  std::string hf_config(dscore_dtype dtype) const {
    return llama_config_json(config_, dtype, weights_ ? &weights_->folder().config() : nullptr);
  }

  double forward_backward(const dscore_batch* batch, const dscore_model_hooks& hooks,
                          double loss_scale) {
    return compute_->forward_backward(split(batch), hooks, loss_scale);
  }
  // The MoE blocks' last pass (model.h metrics; moe/stats.h).
  std::vector<dscore_model_metric> metrics() const {
    return moe_metrics_.values(compute_->moe_stats());
  }
  void forward(const dscore_batch* batch, const dscore_model_hooks& hooks, double* loss,
               dscore_tensor* output) {
    const SplitTokens tokens = split(batch);
    float* logits = transformer::logits_output(output, tokens.batch, config_.vocab_size, "llama");
    compute_->forward(tokens, hooks, loss, logits);
  }

  // ---- KV-cached generation (model.h decode; decoder.h): on the CPU.
  std::unique_ptr<sdk::DecodeCache> decode_cache(int64_t slots, int64_t max_positions,
                                                 dscore_dtype /*param_dtype*/) {
    return compute_->decode_cache(slots, max_positions);
  }
  void decode(sdk::DecodeCache& cache, const dscore_decode_batch& batch,
              const dscore_model_hooks& hooks, dscore_tensor* logits) {
    compute_->decode_batch(cache, batch, hooks, logits, config_.vocab_size, "llama");
  }
  uint64_t decode_cache_bytes(int64_t slots, int64_t max_positions,
                              dscore_dtype /*param_dtype*/) const {
    return transformer::kv_cache_bytes(config_.num_hidden_layers, slots, max_positions,
                                       config_.kv_dim(), sizeof(float));
  }

  // ---- pipeline stages: the boundary at layer k is the input of layer k,
  // (B, T, hidden_size) in the compute's scalar (fp32 on the CPU).
  uint64_t boundary_bytes(size_t layer, int64_t micro_batch, dscore_dtype /*dtype*/) const {
    if (layer == 0 || static_cast<int64_t>(layer) >= config_.layer_count())
      throw Error(DSCORE_OUT_OF_RANGE, "no stage boundary at layer " + std::to_string(layer) +
                                           ": the llama's are at layers 1 to " +
                                           std::to_string(config_.final_layer()));
    if (micro_batch < 1) throw Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
    return compute_->boundary_bytes(micro_batch);
  }
  void stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                     const dscore_model_hooks& hooks, const void* input, void* output) {
    compute_->stage_forward(split(batch), stage, slot, hooks, input, output);
  }
  double stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad) {
    return compute_->stage_backward(split(batch), stage, slot, hooks, loss_scale, output_grad,
                                    input_grad);
  }

  // Forward FLOPs (multiply-adds count 2) as the runner computes them: the
  // LM head (2 N C V) in layer 0 when tied, else in the final layer beside
  // the norm; a block its projections 2 N (2 C Q + 2 C KV) and MLP
  // (mlp_products) and attention (4 N T Q: QK^T and PV over all T positions).
  double layer_flops(size_t layer, int64_t batch) const {
    const double N = static_cast<double>(batch * config_.local_tokens()),
                 C = static_cast<double>(config_.hidden_size),
                 T = static_cast<double>(config_.block_size),
                 V = static_cast<double>(config_.vocab_size),
                 Q = static_cast<double>(config_.q_dim()),
                 KV = static_cast<double>(config_.kv_dim());
    const double head = 2.0 * N * C * V;
    if (layer == 0) return config_.tie_word_embeddings ? head : 0.0;
    if (static_cast<int64_t>(layer) <= config_.num_hidden_layers)
      return 2.0 * N *
                 (2.0 * C * Q + 2.0 * C * KV + mlp_products(static_cast<int64_t>(layer) - 1)) +
             4.0 * N * T * Q;
    if (static_cast<int64_t>(layer) == config_.final_layer())
      return 4.0 * N * C + (config_.tie_word_embeddings ? 0.0 : head);
    throw Error(DSCORE_INVALID_ARGUMENT, "no layer " + std::to_string(layer));
  }

  // A block's MLP's multiply-adds per token: the dense SwiGLU (3 C I), or
  // an MoE block's router (C E), its k experts' SwiGLU (3 C I_e each) and
  // Qwen2-MoE's shared expert and gate (3 C S + C).
  double mlp_products(int64_t block) const {
    const LlamaConfig& c = config_;
    const auto C = static_cast<double>(c.hidden_size);
    if (!c.moe_block(block)) return 3.0 * C * static_cast<double>(c.intermediate_size);
    const auto S = static_cast<double>(c.shared_expert_intermediate_size);
    return C * static_cast<double>(c.num_local_experts) +
           3.0 * C * static_cast<double>(c.expert_width()) *
               static_cast<double>(c.num_experts_per_tok) +
           (S > 0 ? 3.0 * C * S + C : 0.0);
  }

  // The memory of one micro-batch's pass where the model computes
  // (transformer::declared_activation_bytes): the runner's buffers
  // (LlamaRunner::allocate, counted by the same code), the LM head's
  // working block, and what the views' dtypes add.
  uint64_t activation_bytes(int64_t micro_batch, bool checkpointing) const {
    return activation_bytes(micro_batch, checkpointing, DSCORE_DTYPE_F32, DSCORE_DTYPE_F32);
  }
  uint64_t activation_bytes(int64_t micro_batch, bool checkpointing, dscore_dtype param_dtype,
                            dscore_dtype grad_dtype) const {
    const LlamaConfig& c = config_;
    const int64_t largest_layer = transformer::cpu::largest_layer_numel(params_, c.layer_count());
    const transformer::cpu::PassShape pass = cpu_pass_shape(micro_batch, largest_layer);
    const transformer::cuda_memory::PassShape shape{
        .batch = micro_batch,
        .block = c.block_size,
        .heads = c.num_attention_heads,
        .embd = c.hidden_size,
        .vocab = c.vocab_size,
        .widest_column_sum = 0,  // no LayerNorm, no biases
        .largest_layer = largest_layer};
    return transformer::declared_activation_bytes(
        c, c.num_hidden_layers, micro_batch, checkpointing, param_dtype, grad_dtype, pass, shape,
        [&](const LlamaConfig& checkpointed, auto scalar, bool bf16_operands,
            transformer::StateElements state) {
          return runner_activation_bytes<decltype(scalar), float>(
              checkpointed, params_, micro_batch, bf16_operands, state);
        });
  }
  // A pipeline stage's (model.h stage_activation_bytes): per slot, the
  // runner made for the stage's blocks; shared, the LM head's working block
  // and the views' scratch (transformer::declared_stage_bytes).
  sdk::StageMemory stage_activation_bytes(const dscore_pipeline_stage& stage, int64_t micro_batch,
                                          bool checkpointing, dscore_dtype param_dtype,
                                          dscore_dtype grad_dtype) const {
    const auto& c = config_;
    return transformer::declared_stage_bytes<LlamaRunner>(
        c, params_, c.num_hidden_layers, stage, micro_batch, checkpointing, param_dtype, grad_dtype,
        cpu_pass_shape(micro_batch,
                       transformer::cpu::largest_layer_numel(params_, c.layer_count())));
  }
  // What its tensor- and sequence-parallel collectives move (model.h
  // collective_bytes): q, k and v exchanged one by one, the output back.
  dscore_model_collectives collective_bytes(const dscore_pipeline_stage& layers,
                                            int64_t micro_batch, bool checkpointing) const {
    const LlamaConfig& c = config_;
    transformer::SplitTraffic t;
    t.blocks = c.num_hidden_layers;
    t.tp_size = c.tp_size;
    t.sp_size = c.sp_size;
    if (c.tp_size > 1 || c.sp_size > 1) {
      t.rows = micro_batch * c.local_tokens();
      t.embd = c.hidden_size;
      t.element_bytes =
          static_cast<int64_t>(compute_->boundary_bytes(micro_batch)) / (t.rows * t.embd);
      t.to_heads = {c.local_q_dim(), c.local_kv_dim(), c.local_kv_dim()};
      t.to_tokens = {c.local_q_dim()};
      t.head_rows_per_block = transformer::cpu::lm_rows_per_block(t.rows, c.vocab_size);
    }
    t.checkpoint_blocks =
        transformer::checkpointed_config(c, c.num_hidden_layers, checkpointing).checkpoint_blocks;
    dscore_model_collectives out = transformer::split_collectives(t, layers);
    if (c.ep_size > 1) add_expert_traffic(layers, micro_batch, t.checkpoint_blocks, &out);
    return out;
  }
  // Dropless routing (moe_mlp.h): k routes of each token out and back.
  void add_expert_traffic(const dscore_pipeline_stage& layers, int64_t micro_batch,
                          int64_t checkpoint_blocks, dscore_model_collectives* out) const {
    const LlamaConfig& c = config_;
    transformer::moe::add_expert_traffic(
        c.num_hidden_layers, [&](int64_t l) { return c.moe_block(l); }, layers, checkpoint_blocks,
        c.num_local_experts, c.num_experts_per_tok * micro_batch * c.local_tokens(), c.hidden_size,
        out);
  }

 private:
  // The CPU pass's shape for the views' scratch (cpu/view_scratch.h).
  transformer::cpu::PassShape cpu_pass_shape(int64_t micro_batch, int64_t largest_layer) const {
    const LlamaConfig& c = config_;
    return transformer::cpu::PassShape{
        .tokens = micro_batch * c.local_tokens(),
        .largest_layer = largest_layer,
        // Rounded inside linear_bf16: o_proj's input and the output
        // gradients of the attention's projections and down_proj (the
        // runner's other operands, gate_proj's and up_proj's output
        // gradients included, are made rounded).
        .linear_in = c.q_dim(),
        .linear_out = std::max(c.hidden_size, c.q_dim()),
        .embd = c.hidden_size,
        .vocab = c.vocab_size,
        .attention = {micro_batch, c.block_size, c.num_attention_heads, c.num_key_value_heads,
                      c.head_dim},
        // down_proj's input gradient (cpu_backend.h's mlp_backward).
        .consumed_n = c.intermediate_size,
        .consumed_k = c.hidden_size};
  }

  const dscore_model_param* param_at(size_t index) const {
    return transformer::param_at(params_.description(), index);
  }

  SplitTokens split(const dscore_batch* batch) const {
    return transformer::split_tokens(batch, config_.block_size, config_.vocab_size, "llama",
                                     config_.sequence());
  }

  LlamaConfig config_;
  LlamaParams params_;
  std::unique_ptr<transformer::Compute> compute_;
  std::unique_ptr<LlamaWeights> weights_;  // the from_pretrained folder
  transformer::moe::PassMetrics moe_metrics_{config_.num_local_experts, config_.ep_size > 1};
};

// CUDA where this build has the CUDA module ("device": "cuda").
#ifdef DSCORE_MODEL_WITH_CUDA
constexpr uint64_t kCaps =
    DSCORE_CAP_CPU | DSCORE_CAP_CUDA | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16;
#else
constexpr uint64_t kCaps = DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16;
#endif

const dscore_plugin_descriptor kLlama = sdk::model_descriptor<Llama>(
    "llama", "0.1.0",
    "Llama-family decoder (RMSNorm, rotary embeddings incl. Llama 3 scaling, SwiGLU, "
    "grouped-query attention; transformers' LlamaForCausalLM names; Mixtral, Qwen2(-MoE) and "
    "Qwen3(-MoE) on the CPU); CPU (BLAS + TBB) and CUDA kernels",
    kCaps, kParamsSchema);

}  // namespace
}  // namespace dscore::llama

DSCORE_PLUGIN_LIBRARY("dscore-llama", "0.1.0", "dscore", &dscore::llama::kLlama)
