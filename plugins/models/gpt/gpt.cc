// The built-in "gpt" model: a GPT-2-style decoder (token and position
// embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP,
// final LayerNorm, LM head tied to the token embedding, cross-entropy),
// forward and backward by hand, through the hooks of model.h.
// Input "tokens": (B, block_size + 1) int32; forward()'s output is the
// logits (B, vocab_size) fp32 at each sample's last non-padding position.
// "gpt2" is the same model read from a Hugging Face GPT-2 folder
// (from_pretrained); both export to one (gpt2_hf.h).
#include <dscore/model.h>
#include <dscore/cpp/model_plugin.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "../hf_common/hf_config.h"
#include "../transformer_common/cpu/linear.h"
#include "../transformer_common/cpu/view_scratch.h"
#include "../transformer_common/cuda_module.h"
#include "../transformer_common/model_io.h"
#include "../transformer_common/moe/expert_traffic.h"
#include "../transformer_common/pass_memory.h"
#include "../transformer_common/split_traffic.h"
#include "../transformer_common/tensor_parallel.h"
#include "compute.h"
#include "gpt2_hf.h"
#include "gpt_config.h"
#include "gpt_params.h"
#include "tokens.h"

namespace dscore::gpt {
namespace {

using sdk::Error;

// The params gpt and gpt2 share (read_run_options), closing each schema.
constexpr const char kRunOptionsSchema[] = R"json(
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
      "doc": "this rank's slice of the sequence (set by the engine for each rank)"}
})json";

const std::string kParamsSchema = std::string(R"json({
  "n_layer": {"type": "int", "default": 12, "min": 1, "doc": "transformer blocks"},
  "n_head": {"type": "int", "default": 12, "min": 1, "doc": "attention heads; must divide n_embd"},
  "n_embd": {"type": "int", "default": 768, "min": 1, "doc": "embedding width (channels)"},
  "block_size": {"type": "int", "default": 1024, "min": 1,
                 "doc": "context length T; each sample is T + 1 tokens"},
  "vocab_size": {"type": "int", "default": 50257, "min": 1,
                 "doc": "token ids are 0 .. vocab_size-1 (256 for byte-level text)"},
  "dropout": {"type": "number", "default": 0.0, "min": 0, "max": 0,
              "doc": "dropout is not implemented: only 0"},
  "moe_num_experts": {"type": "int", "default": 0, "min": 0,
      "doc": "Mixture of Experts (docs/moe.md): experts per MoE block; 0 = a dense model"},
  "moe_every": {"type": "int", "default": 2, "min": 1,
      "doc": "block l (from 0) is an MoE block when (l + 1) % moe_every == 0 (2: every other block, as GShard; 1: all)"},
  "moe_k": {"type": "int", "default": 1, "min": 1,
      "doc": "experts per token (DeepSpeed MoE's k: top-1, top-2, top-k gating)"},
  "moe_router": {"type": "string", "default": "deepspeed", "enum": ["deepspeed", "dropless"],
      "doc": "deepspeed: DeepSpeed-MoE's capacity-limited gating; dropless: every route kept (Mixtral, Qwen-MoE)"},
  "moe_capacity_factor": {"type": "number", "default": 1.0,
      "doc": "training capacity: ceil(tokens / experts * capacity_factor * k) slots per expert"},
  "moe_eval_capacity_factor": {"type": "number", "default": 1.0,
      "doc": "the same in evaluation (forward only)"},
  "moe_min_capacity": {"type": "int", "default": 4, "min": 0,
      "doc": "the fewest slots per expert"},
  "moe_drop_tokens": {"type": "bool", "default": true,
      "doc": "drop routes past the capacity; false: the capacity is the largest expert load"},
  "moe_use_rts": {"type": "bool", "default": true,
      "doc": "top-1: random token selection decides which routes past the capacity drop"},
  "moe_noisy_gate_policy": {"type": "string", "default": "none", "enum": ["none", "RSample", "Jitter"],
      "doc": "training noise: RSample (Gumbel noise on the top-1 choice), Jitter (the gate's input times U(0.99, 1.01))"},
  "moe_top2_2nd_expert_sampling": {"type": "bool", "default": true,
      "doc": "top-2: Gumbel noise picks the second expert (DeepSpeed's default)"},
  "moe_drop_policy": {"type": "string", "default": "probs", "enum": ["probs", "position"],
      "doc": "k > 2: which routes past the capacity drop (the lowest gates, or the latest tokens)"},
  "moe_norm_topk_prob": {"type": "bool", "default": true,
      "doc": "dropless: renormalise the k gates to sum to 1"},
  "moe_loss_coeff": {"type": "number", "default": 0.01, "min": 0,
      "doc": "the load-balancing loss l_aux of each MoE block enters the loss times this"},
  "moe_use_residual": {"type": "bool", "default": false,
      "doc": "PR-MoE: a dense MLP beside the experts, mixed in by a learned coefficient"},
  "expert_parallel_size": {"type": "int", "default": 1, "min": 1,
      "doc": "ranks each MoE block's experts are spread over (set by the engine from expert_parallel.autoep_size)"},
  "expert_parallel_rank": {"type": "int", "default": 0, "min": 0,
      "doc": "this rank's share of the experts (set by the engine for each rank)"},)json") +
                                  kRunOptionsSchema;

const std::string kGpt2Schema = std::string(R"json({
  "from_pretrained": {"type": "string", "required": true,
      "doc": "a Hugging Face GPT-2 folder (config.json and model.safetensors or its shards); each rank reads the slices it owns"},
  "block_size": {"type": "int", "default": 0, "min": 0,
                 "doc": "context length T of the training samples (T + 1 tokens each); 0 = config.json's n_positions; at most n_positions"},)json") +
                                kRunOptionsSchema;

// The options gpt and gpt2 share: device and activation checkpointing.
void read_run_options(const sdk::Params& p, GptConfig* c) {
  c->device = p.string("device");
  c->cuda_dtype = p.string("cuda_dtype");
  if (p.boolean("checkpoint_activations")) {
    const int64_t n = p.integer("number_checkpoints");
    c->checkpoint_blocks = n < 0 ? c->n_layer : std::min(n, c->n_layer);
  }
  c->tp_size = p.integer("tensor_parallel_size");
  c->tp_rank = p.integer("tensor_parallel_rank");
  transformer::check_tensor_parallel("gpt", c->tp_size, c->tp_rank, c->n_head, c->n_head,
                                     c->vocab_size, c->device);
  c->sp_size = p.integer("sequence_parallel_size");
  c->sp_rank = p.integer("sequence_parallel_rank");
  transformer::check_sequence_parallel("gpt", c->sp_size, c->sp_rank, c->block_size,
                                       c->local_heads(), c->local_heads(), c->device);
}

// The moe_* params (GptConfig::moe).
void read_moe(const sdk::Params& p, GptConfig* c) {
  namespace moe = transformer::moe;
  c->moe.num_experts = p.integer("moe_num_experts");
  if (c->moe.num_experts == 0) return;
  moe::GatingConfig& g = c->moe;
  g.router =
      p.string("moe_router") == "dropless" ? moe::Router::kDroplessTopK : moe::Router::kDeepSpeed;
  g.k = p.integer("moe_k");
  g.capacity_factor = p.number("moe_capacity_factor");
  g.eval_capacity_factor = p.number("moe_eval_capacity_factor");
  g.min_capacity = p.integer("moe_min_capacity");
  g.drop_tokens = p.boolean("moe_drop_tokens");
  g.use_rts = p.boolean("moe_use_rts");
  const std::string noisy = p.string("moe_noisy_gate_policy");
  g.noisy_gate_policy = noisy == "RSample"  ? moe::NoisyGate::kRSample
                        : noisy == "Jitter" ? moe::NoisyGate::kJitter
                                            : moe::NoisyGate::kNone;
  g.top2_2nd_expert_sampling = p.boolean("moe_top2_2nd_expert_sampling");
  g.drop_policy = p.string("moe_drop_policy") == "position" ? moe::DropPolicy::kPosition
                                                            : moe::DropPolicy::kProbs;
  g.norm_topk_prob = p.boolean("moe_norm_topk_prob");
  c->moe_every = p.integer("moe_every");
  c->moe_loss_coeff = p.number("moe_loss_coeff");
  c->moe_residual = p.boolean("moe_use_residual");
  if (const std::string error = moe::gating_error(g); !error.empty())
    throw Error(DSCORE_INVALID_ARGUMENT, "gpt: moe: " + error);
  if (c->moe_every > c->n_layer)
    throw Error(DSCORE_INVALID_ARGUMENT, "gpt: moe_every " + std::to_string(c->moe_every) +
                                             " leaves none of the " + std::to_string(c->n_layer) +
                                             " blocks an MoE block; use at most n_layer");
  // What the MoE blocks do not run under yet (docs/moe.md).
  const auto refuse = [](const std::string& what, const std::string& fix) {
    throw Error(DSCORE_UNIMPLEMENTED, "gpt: MoE blocks " + what + " are not supported yet; " + fix);
  };
  c->ep_size = p.integer("expert_parallel_size");
  c->ep_rank = p.integer("expert_parallel_rank");
  if (c->ep_rank >= c->ep_size || c->moe.num_experts % c->ep_size != 0)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "gpt: moe_num_experts " + std::to_string(c->moe.num_experts) +
                    " experts do not spread evenly over expert_parallel.autoep_size " +
                    std::to_string(c->ep_size) + " ranks (or expert_parallel_rank " +
                    std::to_string(c->ep_rank) +
                    " is outside them): use an autoep_size that divides the experts");
  if (c->device == "cuda") refuse("on CUDA", "train MoE with \"device\": \"cpu\"");
  if (c->tp_size > 1) refuse("under tensor parallelism", "set tensor_parallel.autotp_size to 1");
  if (c->sp_size > 1) refuse("under sequence parallelism", "set sequence_parallel_size to 1");
}

GptConfig read_config(const sdk::Params& p) {
  GptConfig c;
  c.n_layer = p.integer("n_layer");
  c.n_head = p.integer("n_head");
  c.n_embd = p.integer("n_embd");
  c.block_size = p.integer("block_size");
  c.vocab_size = p.integer("vocab_size");
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.block_size < 1 || c.vocab_size < 1)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "n_layer, n_head, n_embd, block_size and vocab_size must be >= 1");
  if (c.n_embd % c.n_head != 0)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                    std::to_string(c.n_head) + ": each head gets n_embd / n_head channels");
  if (c.vocab_size > INT32_MAX)
    throw Error(DSCORE_INVALID_ARGUMENT, "vocab_size must fit int32 token ids");
  if (p.number("dropout") != 0.0)
    throw Error(DSCORE_INVALID_ARGUMENT,
                "dropout is not implemented in the gpt model; set it to 0");
  read_run_options(p, &c);
  read_moe(p, &c);
  return c;
}

// A gpt2 model's folder and the hyperparameters its config.json gives.
struct Pretrained {
  std::shared_ptr<const hf::HfFolder> folder;
  GptConfig config;
};

Pretrained read_pretrained(const sdk::Params& p) {
  const std::string dir = p.string("from_pretrained");
  if (dir.empty())
    throw Error(DSCORE_INVALID_ARGUMENT,
                "model type \"gpt2\" needs \"from_pretrained\": a Hugging Face GPT-2 folder; "
                "to train a GPT-2 from scratch use type \"gpt\" (same names, and it exports "
                "with dscore export-hf too)");
  Pretrained out;
  out.folder = hf::HfFolder::open(dir);
  out.config = gpt2_config(out.folder->config(), p.integer("block_size"));
  read_run_options(p, &out.config);
  return out;
}

class Gpt : public sdk::Instance {
 public:
  Gpt(sdk::HostRef host, const sdk::Params& p) : Gpt(host, {nullptr, read_config(p)}, p) {}

  Gpt(sdk::HostRef host, Pretrained pretrained, const sdk::Params& p)
      : Instance(host), config_(pretrained.config), params_(config_, p.args()->seed) {
    if (pretrained.folder)
      weights_ = std::make_unique<Gpt2Weights>(std::move(pretrained.folder), params_.description());
    if (config_.device != "cuda")
      compute_ = make_cpu_compute(config_, params_, host);
    else if (p.describe_only())
      compute_ = std::make_unique<transformer::DescribeOnlyCompute>("gpt");
    else
      compute_ = transformer::plugin_cuda_compute("gpt", kCudaModuleFile, kCudaFactorySymbol,
                                                  config_, params_);
  }

  const dscore_model_description* description() const { return &params_.description(); }

  void init_param(size_t index, int64_t offset, int64_t count, dscore_tensor* out) const {
    if (index >= params_.param_count())
      throw Error(DSCORE_OUT_OF_RANGE,
                  "parameter index " + std::to_string(index) + " out of range");
    const int64_t numel = params_.numel(index);
    if (offset < 0 || count < 0 || offset + count > numel)
      throw Error(DSCORE_OUT_OF_RANGE, "init_param: slice outside the parameter");
    if (out == nullptr || out->dtype != DSCORE_DTYPE_F32 || out->numel != count ||
        (count > 0 && out->data == nullptr))
      throw Error(DSCORE_INVALID_ARGUMENT, "init_param: output must be fp32 with count elements");
    if (weights_) {
      // A tensor-parallel rank reads only its part, run by run.
      const dscore_model_param& p = *param_at(index);
      float* data = static_cast<float*>(out->data);
      sdk::for_each_whole_run(p, offset, count, [&](int64_t local, int64_t whole, int64_t n) {
        weights_->read(p, whole, n, data + (local - offset));
      });
    } else {
      params_.init(index, offset, count, static_cast<float*>(out->data));
    }
  }

  // Hugging Face GPT-2: the same names, Conv1D weights transposed.
  dscore_hf_tensor hf_tensor(size_t index) const {
    refuse_hf_export();
    if (index >= params_.param_count())
      throw Error(DSCORE_OUT_OF_RANGE,
                  "parameter index " + std::to_string(index) + " out of range");
    const dscore_model_param* p = param_at(index);
    return {sizeof(dscore_hf_tensor), p->name, gpt2_transposed(p->name) ? 1 : 0};
  }
  std::string hf_config(dscore_dtype dtype) const {
    refuse_hf_export();
    return gpt2_config_json(config_, dtype, weights_ ? &weights_->folder().config() : nullptr);
  }

  double forward_backward(const dscore_batch* batch, const dscore_model_hooks& hooks,
                          double loss_scale) {
    return compute_->forward_backward(split_tokens(batch, config_), hooks, loss_scale);
  }
  // The MoE blocks' last pass (model.h metrics; moe/stats.h).
  std::vector<dscore_model_metric> metrics() const {
    return moe_metrics_.values(compute_->moe_stats());
  }
  void forward(const dscore_batch* batch, const dscore_model_hooks& hooks, double* loss,
               dscore_tensor* output) {
    const SplitTokens tokens = split_tokens(batch, config_);
    float* logits = transformer::logits_output(output, tokens.batch, config_.vocab_size, "gpt");
    compute_->forward(tokens, hooks, loss, logits);
  }

  // ---- KV-cached generation (model.h decode; decoder.h): on the CPU.
  std::unique_ptr<sdk::DecodeCache> decode_cache(int64_t slots, int64_t max_positions,
                                                 dscore_dtype /*param_dtype*/) {
    return compute_->decode_cache(slots, max_positions);
  }
  void decode(sdk::DecodeCache& cache, const dscore_decode_batch& batch,
              const dscore_model_hooks& hooks, dscore_tensor* logits) {
    compute_->decode_batch(cache, batch, hooks, logits, config_.vocab_size, "gpt");
  }
  uint64_t decode_cache_bytes(int64_t slots, int64_t max_positions,
                              dscore_dtype /*param_dtype*/) const {
    return transformer::kv_cache_bytes(config_.n_layer, slots, max_positions, config_.n_embd,
                                       sizeof(float));
  }

  // ---- pipeline stages: the boundary at layer k is the input of layer k,
  // (B, T, n_embd) in the compute's scalar (fp32 on the CPU).
  uint64_t boundary_bytes(size_t layer, int64_t micro_batch, dscore_dtype /*dtype*/) const {
    if (layer == 0 || static_cast<int64_t>(layer) >= config_.layer_count())
      throw Error(DSCORE_OUT_OF_RANGE, "no stage boundary at layer " + std::to_string(layer) +
                                           ": the gpt's are at layers 1 to " +
                                           std::to_string(config_.final_layer()));
    if (micro_batch < 1) throw Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
    return compute_->boundary_bytes(micro_batch);
  }
  void stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                     const dscore_model_hooks& hooks, const void* input, void* output) {
    compute_->stage_forward(split_tokens(batch, config_), stage, slot, hooks, input, output);
  }
  double stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad) {
    return compute_->stage_backward(split_tokens(batch, config_), stage, slot, hooks, loss_scale,
                                    output_grad, input_grad);
  }

  // Forward FLOPs (multiply-adds count 2) as the runner computes them:
  // layer 0 holds the LM head (2 N C V), a block its four matmuls
  // (2 N 12 C^2) and attention (4 N T C: QK^T and PV over all T positions).
  // Under sequence parallelism N is this rank's tokens (its attention: all T
  // queries of 1 / sp of the heads, as many products).
  double layer_flops(size_t layer, int64_t batch) const {
    const double N = static_cast<double>(batch * config_.local_tokens()),
                 C = static_cast<double>(config_.n_embd);
    const double T = static_cast<double>(config_.block_size),
                 V = static_cast<double>(config_.vocab_size);
    if (layer == 0) return 2.0 * N * C * V;
    const int64_t block = static_cast<int64_t>(layer) - 1;
    if (block < config_.n_layer && config_.moe_block(block)) {
      // Attention, the gate, k experts' MLPs per token (at most: dropped
      // routes skip theirs), PR-MoE's dense MLP and coefficient.
      const double E = static_cast<double>(config_.moe.num_experts),
                   k = static_cast<double>(config_.moe.k);
      const double residual = config_.moe_residual ? 2.0 * N * (8.0 * C * C + 2.0 * C) : 0.0;
      return 2.0 * N * 4.0 * C * C + 4.0 * N * T * C + 2.0 * N * C * E + k * 2.0 * N * 8.0 * C * C +
             residual;
    }
    if (static_cast<int64_t>(layer) <= config_.n_layer)
      return 2.0 * N * 12.0 * C * C + 4.0 * N * T * C;
    if (static_cast<int64_t>(layer) == config_.final_layer()) return 8.0 * N * C;
    throw Error(DSCORE_INVALID_ARGUMENT, "no layer " + std::to_string(layer));
  }

  // The memory of one micro-batch's pass where the model computes
  // (transformer::declared_activation_bytes): the runner's buffers
  // (GptRunner::allocate, counted by the same code), the LM head's working
  // block, and what the views' dtypes add.
  uint64_t activation_bytes(int64_t micro_batch, bool checkpointing) const {
    return activation_bytes(micro_batch, checkpointing, DSCORE_DTYPE_F32, DSCORE_DTYPE_F32);
  }
  uint64_t activation_bytes(int64_t micro_batch, bool checkpointing, dscore_dtype param_dtype,
                            dscore_dtype grad_dtype) const {
    const GptConfig& c = config_;
    const int64_t largest_layer = transformer::cpu::largest_layer_numel(params_, c.layer_count());
    const transformer::cpu::PassShape pass = cpu_pass_shape(micro_batch, largest_layer);
    const transformer::cuda_memory::PassShape shape{
        .batch = micro_batch,
        .block = c.block_size,
        .heads = c.n_head,
        .embd = c.n_embd,
        .vocab = c.vocab_size,
        .widest_column_sum = 4 * c.n_embd,  // the MLP's fc bias
        .largest_layer = largest_layer};
    return transformer::declared_activation_bytes(
        c, c.n_layer, micro_batch, checkpointing, param_dtype, grad_dtype, pass, shape,
        [&](const GptConfig& checkpointed, auto scalar, bool bf16_operands,
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
    return transformer::declared_stage_bytes<GptRunner>(
        c, params_, c.n_layer, stage, micro_batch, checkpointing, param_dtype, grad_dtype,
        cpu_pass_shape(micro_batch,
                       transformer::cpu::largest_layer_numel(params_, c.layer_count())));
  }
  // What its tensor-, sequence- and expert-parallel collectives move
  // (model.h collective_bytes): q|k|v exchanged packed, the output back;
  // an MoE block's tokens to their experts and back.
  dscore_model_collectives collective_bytes(const dscore_pipeline_stage& layers,
                                            int64_t micro_batch, bool checkpointing) const {
    const GptConfig& c = config_;
    transformer::SplitTraffic t;
    t.blocks = c.n_layer;
    t.tp_size = c.tp_size;
    t.sp_size = c.sp_size;
    if (c.tp_size > 1 || c.sp_size > 1) {
      t.rows = micro_batch * c.local_tokens();
      t.embd = c.n_embd;
      t.element_bytes =
          static_cast<int64_t>(compute_->boundary_bytes(micro_batch)) / (t.rows * t.embd);
      t.to_heads = {3 * c.local_width()};
      t.to_tokens = {c.local_width()};
      t.head_rows_per_block = transformer::cpu::lm_rows_per_block(t.rows, c.vocab_size);
    }
    t.checkpoint_blocks =
        transformer::checkpointed_config(c, c.n_layer, checkpointing).checkpoint_blocks;
    dscore_model_collectives out = transformer::split_collectives(t, layers);
    if (c.ep_size > 1) add_expert_traffic(layers, micro_batch, t.checkpoint_blocks, &out);
    return out;
  }
  // Capacity routing (moe_mlp.h) keeps at most E x capacity of the k routes
  // of each token.
  void add_expert_traffic(const dscore_pipeline_stage& layers, int64_t micro_batch,
                          int64_t checkpoint_blocks, dscore_model_collectives* out) const {
    const GptConfig& c = config_;
    const transformer::moe::GatingConfig& g = c.moe;
    const int64_t N = micro_batch * c.local_tokens(), E = g.num_experts;
    int64_t rows = g.k * N;
    if (g.router == transformer::moe::Router::kDeepSpeed && g.drop_tokens)
      rows = std::min(rows, E * transformer::moe::drop_capacity(g, N, /*training=*/true));
    transformer::moe::add_expert_traffic(
        c.n_layer, [&](int64_t l) { return c.moe_block(l); }, layers, checkpoint_blocks, E, rows,
        c.n_embd, out);
  }

 private:
  // GPT-2 has no MoE blocks: an MoE gpt has no Hugging Face architecture.
  void refuse_hf_export() const {
    if (config_.has_moe())
      throw Error(DSCORE_UNIMPLEMENTED,
                  "gpt: an MoE gpt has no Hugging Face architecture to export to (GPT-2 has no "
                  "experts); consolidate it with dscore zero-to-fp32 instead");
  }

  // The CPU pass's shape for the views' scratch (cpu/view_scratch.h).
  transformer::cpu::PassShape cpu_pass_shape(int64_t micro_batch, int64_t largest_layer) const {
    const GptConfig& c = config_;
    return transformer::cpu::PassShape{
        .tokens = micro_batch * c.local_tokens(),
        .largest_layer = largest_layer,
        // Rounded inside linear_bf16: the attention projection's input and
        // the qkv linear's output gradient (the runner's other operands are
        // made rounded).
        .linear_in = c.n_embd,
        .linear_out = 3 * c.n_embd,
        .embd = c.n_embd,
        .vocab = c.vocab_size,
        .attention = {micro_batch, c.block_size, c.n_head, c.n_head, c.head_size()},
        .attention_heads_kept = true,  // in the qkv activation (runner.h)
        // The MLP projection's input gradient (cpu_backend.h's mlp_backward).
        .consumed_n = 4 * c.n_embd,
        .consumed_k = c.n_embd};
  }

  const dscore_model_param* param_at(size_t index) const {
    return transformer::param_at(params_.description(), index);
  }

  GptConfig config_;
  GptParams params_;
  transformer::moe::PassMetrics moe_metrics_{config_.moe.num_experts, config_.ep_size > 1};
  std::unique_ptr<Gpt2Weights> weights_;  // gpt2: the from_pretrained folder
  std::unique_ptr<GptCompute> compute_;
};

class Gpt2 : public Gpt {
 public:
  Gpt2(sdk::HostRef host, const sdk::Params& p) : Gpt(host, read_pretrained(p), p) {}
};

// CUDA where this build has the CUDA module ("device": "cuda").
#ifdef DSCORE_MODEL_WITH_CUDA
constexpr uint64_t kCaps =
    DSCORE_CAP_CPU | DSCORE_CAP_CUDA | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16;
#else
constexpr uint64_t kCaps = DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16;
#endif

const dscore_plugin_descriptor kGpt = sdk::model_descriptor<Gpt>(
    "gpt", "0.1.0",
    "GPT-2-style decoder (byte-level text or llm.c token shards); CPU (BLAS + TBB) and CUDA "
    "kernels",
    kCaps, kParamsSchema.c_str());

const dscore_plugin_descriptor kGpt2 = sdk::model_descriptor<Gpt2>(
    "gpt2", "0.1.0",
    "GPT-2 from a Hugging Face folder (from_pretrained): the gpt model with config.json's "
    "hyperparameters and the folder's weights",
    kCaps, kGpt2Schema.c_str());

}  // namespace
}  // namespace dscore::gpt

DSCORE_PLUGIN_LIBRARY("dscore-gpt", "0.1.0", "dscore", &dscore::gpt::kGpt, &dscore::gpt::kGpt2)
