/* dscore plugin ABI v1: models (DSCORE_KIND_MODEL).
 *
 * A model describes itself as an ordered list of LAYERS, each holding named
 * parameter tensors, and runs forward/backward through host hooks, so the
 * engine can gather a layer's parameters just before it runs and free them
 * after (ZeRO-3), and reduce a layer's gradients as soon as they are ready
 * (overlap with the rest of backward). The model never owns parameters,
 * gradients or optimizer state: it computes on views the host lends it.
 *
 * Named in ds_config.json as {"model": {"type": "<name>", ...params}}.
 *
 * A forward_backward() call looks like:
 *   for each layer l in order:    hooks->acquire(l, FORWARD) ... compute ... hooks->release(l)
 *   loss
 *   for each layer l in reverse:  hooks->acquire(l, BACKWARD) ... add grads ...
 *                                 hooks->grads_ready(l); hooks->release(l)
 * A layer may be acquired more than once (recomputation); every acquire is
 * matched by a release before forward_backward returns, also on error.
 */
#ifndef DSCORE_MODEL_H_
#define DSCORE_MODEL_H_

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dscore_model dscore_model;

/* dscore_model_param.flags */
#define DSCORE_PARAM_NO_WEIGHT_DECAY (1u << 0) /* biases, norms: weight decay multiplier 0 */
/* ABI 1.2: the tensor is this rank's part of a whole tensor split over the
 * tensor-parallel group (host->communicator(ctx, DSCORE_GROUP_TENSOR_PARALLEL)),
 * as the tp_* fields below say. Without the flag every rank of the group
 * holds the whole tensor (replicated: a LayerNorm, a row-parallel bias), and
 * the host counts it once in the gradient norm. */
#define DSCORE_PARAM_TP_SPLIT (1u << 1)
/* ABI 1.2: an expert's tensor under expert parallelism: this rank holds it
 * for its share of an MoE layer's experts (the experts are spread over the
 * expert-parallel group, host->communicator(ctx, DSCORE_GROUP_EXPERT_PARALLEL)),
 * and so do the ranks at its place in the other expert-parallel groups (its
 * expert-data-parallel peers): the host averages its gradients over those
 * and partitions its ZeRO state among them alone. With DSCORE_PARAM_TP_SPLIT
 * as well, the tp_* fields say which part of a whole tensor stacked over all
 * experts this rank's experts are (the gpt's [experts, ...] weights: tp_dim
 * 0, tp_full_extent the experts in all), so checkpoints hold whole tensors;
 * without it, the tensor is one expert's whole (a per-expert name). */
#define DSCORE_PARAM_EXPERT (1u << 2)

typedef struct dscore_model_param {
  uint32_t struct_size;
  const char* name; /* unique in the model, e.g. "h.3.attn.c_attn.weight" */
  int32_t ndim;
  const int64_t* shape; /* ndim entries */
  int64_t numel;
  uint32_t flags; /* DSCORE_PARAM_* */
  /* ABI 1.2 (read where struct_size covers them and flags has
   * DSCORE_PARAM_TP_SPLIT): the whole tensor's shape is `shape` with
   * dimension tp_dim holding tp_full_extent entries, made of tp_blocks equal
   * blocks (3 for a fused q|k|v, else 1); of each block this rank holds
   * shape[tp_dim] / tp_blocks consecutive entries from tp_offset (within the
   * block). The name is the whole tensor's: checkpoints and Hugging Face
   * folders hold whole tensors, and each rank reads and writes its part. */
  int32_t tp_dim;
  int32_t tp_blocks;
  int64_t tp_full_extent;
  int64_t tp_offset;
} dscore_model_param;

typedef struct dscore_model_layer {
  uint32_t struct_size;
  const char* name;
  size_t param_count;
  const dscore_model_param* const* params;
} dscore_model_layer;

/* One input tensor of a batch; the leading (batch) dimension is implied. */
typedef struct dscore_model_input {
  uint32_t struct_size;
  const char* name; /* "x", "tokens" */
  dscore_dtype dtype;
  int32_t ndim;         /* dimensions per sample */
  const int64_t* shape; /* per-sample shape */
} dscore_model_input;

/* ABI 1.2: layer `reader`'s work also reads layer `owner`'s parameters and
 * adds into their gradients (the gpt's LM head, in its final layer, reads
 * the embedding layer's wte). A pipeline stage that runs `reader` but not
 * `owner` holds a copy of `owner`, kept equal to the original by summing the
 * copies' gradients before each update (DeepSpeed's TiedLayerSpec). */
typedef struct dscore_layer_tie {
  uint32_t struct_size;
  size_t owner;
  size_t reader;
} dscore_layer_tie;

/* Everything the engine plans from. Parameters are numbered 0, 1, ... in
 * layer order, then in each layer's order: that index is init_param's. */
typedef struct dscore_model_description {
  uint32_t struct_size;
  size_t layer_count;
  const dscore_model_layer* const* layers;
  size_t input_count;
  const dscore_model_input* const* inputs;
  int64_t hidden_size; /* for "auto" bucket sizes; 0 if not meaningful */
  /* ABI 1.2 (read where struct_size covers them): the layer ties, none when
   * tie_count is 0. */
  size_t tie_count;
  const dscore_layer_tie* const* ties;
} dscore_model_description;

/* ABI 1.2: one pipeline stage's share of the layers, [first_layer,
 * end_layer) of the description's, given to stage_forward/stage_backward.
 * The first stage starts at layer 0, the last ends at layer_count. */
typedef struct dscore_pipeline_stage {
  uint32_t struct_size;
  size_t first_layer;
  size_t end_layer;
} dscore_pipeline_stage;

/* ABI 1.2: what a model's own collectives move for one micro-batch
 * (collective_bytes): the calls it makes on each group it is lent and their
 * bytes, each call counted at its input buffer's size (as DeepSpeed's comms
 * logger counts a message). The caller sets struct_size. */
typedef struct dscore_model_collectives {
  uint32_t struct_size;
  uint64_t tensor_parallel_calls; /* allreduces on DSCORE_GROUP_TENSOR_PARALLEL */
  uint64_t tensor_parallel_bytes;
  uint64_t sequence_parallel_calls; /* all_to_alls on DSCORE_GROUP_SEQUENCE_PARALLEL */
  uint64_t sequence_parallel_bytes;
  /* Read where struct_size covers them: all_to_all and all_to_all_v on
   * DSCORE_GROUP_EXPERT_PARALLEL (an MoE layer's tokens to their experts'
   * ranks and back; data-dependent, so the routes' balanced expectation). */
  uint64_t expert_parallel_calls;
  uint64_t expert_parallel_bytes;
} dscore_model_collectives;

/* ABI 1.2: one value a model measured in its last pass besides the loss,
 * for the monitors (metrics): the MoE layers' aux loss, dropped routes,
 * expert loads. `name` is a monitor tag under "Train/Samples/" (e.g.
 * "moe/dropped_routes"), owned by the model and alive until its next
 * call. `combine`: how the host folds the values of an accumulation
 * cycle's micro-batches and of the data-parallel ranks into the step's. */
enum { DSCORE_METRIC_SUM = 0, DSCORE_METRIC_MEAN = 1 };
typedef struct dscore_model_metric {
  uint32_t struct_size;
  const char* name;
  double value;
  int32_t combine; /* DSCORE_METRIC_SUM or DSCORE_METRIC_MEAN */
} dscore_model_metric;

/* A batch: one tensor per declared input, in declaration order, each with
 * leading dimension batch_size. Borrowed for the call. */
typedef struct dscore_batch {
  uint32_t struct_size;
  int64_t batch_size;
  size_t count;
  const dscore_tensor* const* tensors;
} dscore_batch;

/* ABI 1.2: KV-cached generation (decode_cache_create and the calls after
 * it). A model's cache holds, for each of `slots` sequences, what its
 * attention layers keep of up to `max_positions` tokens (keys and values);
 * decode() appends new tokens to some of the slots and returns the logits
 * at each one's last new token. */
typedef struct dscore_decode_cache dscore_decode_cache; /* the model's */

/* One decode() call: `count` sequences, each in its own cache slot
 * (slots[i] distinct, < the cache's slots), with lengths[i] >= 1 new
 * tokens at positions positions[i] .. positions[i] + lengths[i] - 1. The
 * slot keeps its first positions[i] tokens (0: it starts afresh, a prompt's
 * prefill) and forgets any after them; positions[i] + lengths[i] <= the
 * cache's max_positions. tokens: the new tokens, one sequence after
 * another (the sum of lengths). Borrowed for the call. */
typedef struct dscore_decode_batch {
  uint32_t struct_size;
  size_t count;
  const int32_t* slots;
  const int64_t* positions;
  const int64_t* lengths;
  const int32_t* tokens;
} dscore_decode_batch;

typedef int32_t dscore_acquire_mode;
enum { DSCORE_ACQUIRE_FORWARD = 0, DSCORE_ACQUIRE_BACKWARD = 1 };

/* dscore_layer_views.flags (PROVISIONAL), set by the model before acquire():
 * STREAM_ORDERED: the model reads and writes the layer's device views only
 * by work it enqueues on the hooks' stream after acquire() returns. The
 * host may then return before their contents are ready, ordering the stream
 * after the work that makes them so (a GPU gather) instead of waiting for
 * it. Ignored where the hooks' stream is NULL. */
enum { DSCORE_VIEWS_STREAM_ORDERED = 1u << 0 };

/* What acquire() lends: the layer's parameters in declaration order (full
 * tensors, in the engine's compute dtype: fp32, bf16 or fp16 — convert on
 * use), and in BACKWARD mode gradient tensors of the same shapes into which
 * backward ADDS its gradient (the host zeroes them when it wants a fresh
 * gradient). grads is NULL in FORWARD mode. Valid until release(). */
typedef struct dscore_layer_views {
  uint32_t struct_size; /* set by the model (caller); the host fills the rest */
  size_t count;
  const dscore_tensor* const* params;
  dscore_tensor* const* grads;
  uint32_t flags; /* ABI 1.2, set by the model: DSCORE_VIEWS_* (0: the views are ready) */
} dscore_layer_views;

/* Host hooks for one forward_backward/forward call; `ctx` is the host's and
 * is passed back unchanged. Errors from a hook must be returned by the model
 * (after releasing what it acquired). Call only from the thread that called
 * the model. */
typedef struct dscore_model_hooks {
  uint32_t struct_size;
  void* ctx;
  dscore_status (*acquire)(void* ctx, size_t layer, dscore_acquire_mode mode,
                           dscore_layer_views* out);
  dscore_status (*release)(void* ctx, size_t layer);
  /* The layer's gradients for this call are complete: the engine may start
   * reducing them while backward goes on. Call once per layer per backward,
   * while the layer is acquired. */
  dscore_status (*grads_ready)(void* ctx, size_t layer);
  /* PROVISIONAL. The host's stream for the call's device work: a
   * cudaStream_t when the host computes on CUDA, else NULL. A model that
   * computes on that device enqueues its work there (or orders its own
   * stream after it) and may then call release() and grads_ready() before
   * the work on the layer's device views is done: the host orders its later
   * device work after the stream. Views in host memory must be done with
   * before release(). With NULL, or for a model that ignores it, the work
   * on a layer's views is done when those hooks are called. A model that
   * computes on the stream itself may also take views that are ready in
   * its order (DSCORE_VIEWS_STREAM_ORDERED). */
  void* stream;
} dscore_model_hooks;

/* How one parameter is stored in a Hugging Face model folder (the names and
 * layouts transformers uses), for `dscore export-hf`. Filled by the model's
 * hf_tensor(); the caller sets struct_size. */
typedef struct dscore_hf_tensor {
  uint32_t struct_size;
  const char* name;  /* the Hugging Face tensor name; valid until destroy() */
  int32_t transpose; /* non-zero: stored as the 2-D transpose of the parameter
                        (e.g. GPT-2's Conv1D weights, (in, out)) */
} dscore_hf_tensor;

typedef struct dscore_model_vtable {
  uint32_t struct_size;

  /* Required. params is the "model" section without "type". */
  dscore_status (*create)(const dscore_create_args* args, dscore_model** out);
  /* Required. */
  void (*destroy)(dscore_model* self);

  /* Required. The description stays valid (and unchanged) until destroy(). */
  dscore_status (*describe)(const dscore_model* self, const dscore_model_description** out);

  /* Required. Write the initial values of elements [offset, offset + count)
   * of parameter `param_index` (flattened row-major) into `out`, an fp32
   * tensor of `count` elements. Must be a deterministic function of the
   * seed, the parameter and the element index only, so each rank can
   * initialise just its own shard and every world size gets the same model.
   * May be called concurrently for different parameters. */
  dscore_status (*init_param)(const dscore_model* self, size_t param_index, int64_t offset,
                              int64_t count, dscore_tensor* out);

  /* Required. Mean loss over the batch's samples into *loss (unscaled), and
   * ADD d(loss_scale * loss)/d(param) into the gradient views of every layer
   * through the hooks. */
  dscore_status (*forward_backward)(dscore_model* self, const dscore_batch* batch,
                                    const dscore_model_hooks* hooks, double loss_scale,
                                    double* loss);

  /* Optional. Forward only (evaluation, generation): mean loss into *loss if
   * non-NULL; the model's output for the batch (e.g. logits at the last
   * position, shape documented by the model) into *output if non-NULL. */
  dscore_status (*forward)(dscore_model* self, const dscore_batch* batch,
                           const dscore_model_hooks* hooks, double* loss, dscore_tensor* output);

  /* Optional. A deterministic synthetic task: fill out's tensors (allocated
   * by the host per the declared inputs, out->batch_size samples; the views
   * are const but their data is the plugin's to write) with
   * samples first_sample, first_sample + 1, ... Sample i must depend only on
   * (seed, i), so any rank can produce any slice of any global batch.
   * UNIMPLEMENTED (or NULL) when the model needs a data file. */
  dscore_status (*synthetic_batch)(const dscore_model* self, uint64_t seed, int64_t first_sample,
                                   const dscore_batch* out);

  /* Optional. Floating-point operations of layer `layer`'s forward pass for
   * a batch of `batch_size` samples (multiply-adds count 2), into
   * *forward_flops; backward is taken as twice that. For the flops profiler
   * and throughput figures. UNIMPLEMENTED (or NULL) when unknown. */
  dscore_status (*layer_flops)(const dscore_model* self, size_t layer, int64_t batch_size,
                               double* forward_flops);
  /* ---- minor 0 ends here ---- */

  /* Optional (ABI 1.1). The most bytes of activations and backward scratch
   * the model holds at once during one forward_backward() of a micro-batch
   * of `micro_batch` samples, into *peak_bytes: everything it allocates for
   * the pass beyond the parameters and gradients the host lends (kept
   * activations, recomputation and gradient buffers, the loss head's
   * workspace), in the memory it computes in: GPU memory for a model that
   * computes on CUDA (its scratch and its libraries' workspaces too, which
   * it should allocate at its first pass, not at create: the host checks
   * the GPU's free memory after create). checkpointing = 0: every
   * activation is kept; non-zero: with activation checkpointing as this
   * instance's parameters set it (every layer it can checkpoint when they
   * do not say). The host adds it to the memory plan (`dscore plan`, and
   * the check that a run fits its node or its GPU). UNIMPLEMENTED (or NULL)
   * when unknown: the plan then says activations are not counted. */
  dscore_status (*activation_bytes)(const dscore_model* self, int64_t micro_batch,
                                    int32_t checkpointing, uint64_t* peak_bytes);
  /* ---- minor 1 ends here ---- */

  /* Optional (ABI 1.2), with hf_config: the model can be exported as a
   * Hugging Face folder (`dscore export-hf`) that transformers loads. The
   * Hugging Face name and layout of parameter `param_index` into *out (the
   * caller sets out->struct_size). Every parameter must have one; the
   * exported tensor's dtype is the export's (fp32 unless asked otherwise).
   * UNIMPLEMENTED (or NULL) when the model has no Hugging Face form. */
  dscore_status (*hf_tensor)(const dscore_model* self, size_t param_index, dscore_hf_tensor* out);
  /* Optional (ABI 1.2). The export's config.json text (UTF-8 JSON, the keys
   * transformers reads for this architecture), with `dtype` (F32, BF16 or
   * F16) as the weights' dtype, written into buffer (capacity bytes,
   * NUL-terminated when it fits); *length = its length without the NUL. The
   * host calls again with a larger buffer when capacity <= *length. */
  dscore_status (*hf_config)(const dscore_model* self, dscore_dtype dtype, char* buffer,
                             size_t capacity, size_t* length);
  /* Optional (ABI 1.2). activation_bytes for the views the host will lend:
   * parameters in `param_dtype` and gradients in `grad_dtype` (F32, BF16 or
   * F16; the run's model and gradient dtypes), so that a model which
   * computes on converted copies or keeps 16-bit operands counts that
   * scratch too. The host calls it in place of activation_bytes when it is
   * set; NULL: the host calls activation_bytes. */
  dscore_status (*activation_bytes_for)(const dscore_model* self, int64_t micro_batch,
                                        int32_t checkpointing, dscore_dtype param_dtype,
                                        dscore_dtype grad_dtype, uint64_t* peak_bytes);

  /* Optional (ABI 1.2), all three or none: pipeline parallelism. The host
   * cuts the layers into stages, each on its own ranks, and runs a schedule
   * of micro-batches through them (1F1B: stage s keeps up to p - s
   * micro-batches between their forward and backward). What crosses
   * between stages is one BOUNDARY tensor per micro-batch: the input of
   * layer `first_layer` (the output of the layer before it), in a form the
   * model chooses (its bytes are all the host knows); its gradient has the
   * same size. boundary_bytes: that size for `micro_batch` samples at layer
   * `layer` (1 <= layer < layer_count), when parameters are lent in
   * `compute_dtype`. UNIMPLEMENTED where the model cannot be cut there. */
  dscore_status (*boundary_bytes)(const dscore_model* self, size_t layer, int64_t micro_batch,
                                  dscore_dtype compute_dtype, uint64_t* bytes);
  /* Forward of one micro-batch through the stage's layers (acquired through
   * the hooks in FORWARD mode, by their model-wide indices), keeping what
   * the backward needs in activation slot `slot` (0, 1, ...: the host runs
   * at most as many micro-batches between forward and backward as slots it
   * uses, and a slot's micro-batch is backward-ed before the slot is
   * reused). `input`: the boundary at first_layer, NULL on the first stage
   * (which reads the batch). `output`: where the boundary at end_layer goes,
   * NULL on the last stage. The batch is the micro-batch's (every stage
   * gets it; the last keeps what the loss needs). */
  dscore_status (*stage_forward)(dscore_model* self, const dscore_pipeline_stage* stage,
                                 size_t slot, const dscore_batch* batch,
                                 const dscore_model_hooks* hooks, const void* input, void* output);
  /* Backward of slot `slot`'s micro-batch (the same batch again), the
   * stage's layers in reverse in BACKWARD mode, each grads_ready once, as in
   * forward_backward. `output_grad`: the gradient at end_layer's boundary,
   * NULL on the last stage, which computes the loss here: its mean over the
   * micro-batch into *loss and d(loss_scale * loss) as the gradient (other
   * stages ignore loss_scale, their output_grad carries it, and leave *loss
   * alone). `input_grad`: where the gradient at first_layer's boundary
   * goes, NULL on the first stage. A tie's copy (dscore_layer_tie) is
   * acquired by the owner's index; on the stage that holds the owner
   * itself, grads_ready is called for it once, after the last addition. */
  dscore_status (*stage_backward)(dscore_model* self, const dscore_pipeline_stage* stage,
                                  size_t slot, const dscore_batch* batch,
                                  const dscore_model_hooks* hooks, double loss_scale,
                                  const void* output_grad, void* input_grad, double* loss);
  /* Optional (ABI 1.2), with the three above. The activation memory of a
   * stage's passes, as activation_bytes_for is of forward_backward's, for
   * `micro_batch` samples, checkpointing and the view dtypes as there:
   * into *slot_bytes what one activation slot of the stage holds (what
   * stage_forward keeps for stage_backward, and the slot's own backward
   * buffers), into *shared_bytes what the stage's passes use beside their
   * slots at the peak (working memory all slots share: the loss head's on
   * the last stage, copies of 16-bit views). The host counts each slot its
   * schedule uses (`dscore plan`, the fit check). NULL: the host counts
   * the whole model's activation_bytes for each slot, an upper bound. */
  dscore_status (*stage_activation_bytes)(const dscore_model* self,
                                          const dscore_pipeline_stage* stage, int64_t micro_batch,
                                          int32_t checkpointing, dscore_dtype param_dtype,
                                          dscore_dtype grad_dtype, uint64_t* slot_bytes,
                                          uint64_t* shared_bytes);
  /* Optional (ABI 1.2): what the model's own collectives (tensor- and
   * sequence-parallel, model.h's groups) move for one micro-batch of
   * `micro_batch` samples through layers [stage->first_layer,
   * stage->end_layer) (the whole model: [0, layer_count)), forward and
   * backward, with `checkpointing`'s recomputation. Zeros where the model
   * is not split. For `dscore plan`'s communication rows; NULL: not shown. */
  dscore_status (*collective_bytes)(const dscore_model* self, const dscore_pipeline_stage* stage,
                                    int64_t micro_batch, int32_t checkpointing,
                                    dscore_model_collectives* out);
  /* Optional (ABI 1.2): what the last forward_backward measured besides
   * its loss (dscore_model_metric): up to `capacity` metrics into `out`
   * (the host sets each struct_size), their number into *count, which may
   * exceed capacity (call again with room for all). The same names in the
   * same order after every pass of a run. NULL: none. */
  dscore_status (*metrics)(const dscore_model* self, dscore_model_metric* out, size_t capacity,
                           size_t* count);
  /* Optional (ABI 1.2), all four or none: KV-cached generation
   * (dscore_decode_batch). decode_cache_create: a cache of `slots`
   * sequences of up to `max_positions` tokens (at most the model's
   * context), for parameters lent in `param_dtype`, in the memory the model
   * computes in; OUT_OF_RANGE beyond the context. decode_cache_destroy
   * frees it (NULL: nothing). decode: the batch's new tokens through every
   * layer (acquired through the hooks in FORWARD mode, as forward()),
   * their keys and values kept in the cache, the logits at each sequence's
   * last new token into `logits`: (count, vocab) fp32 in host memory, the
   * same values (to rounding) as forward() over the slot's whole sequence.
   * UNIMPLEMENTED where this instance cannot decode (its device, an MoE
   * layer whose routes depend on the batch): the host then runs forward()
   * over each whole sequence. decode_cache_bytes: what such a cache takes,
   * for `dscore plan`. */
  dscore_status (*decode_cache_create)(dscore_model* self, int64_t slots, int64_t max_positions,
                                       dscore_dtype param_dtype, dscore_decode_cache** out);
  void (*decode_cache_destroy)(dscore_model* self, dscore_decode_cache* cache);
  dscore_status (*decode)(dscore_model* self, dscore_decode_cache* cache,
                          const dscore_decode_batch* batch, const dscore_model_hooks* hooks,
                          dscore_tensor* logits);
  dscore_status (*decode_cache_bytes)(const dscore_model* self, int64_t slots,
                                      int64_t max_positions, dscore_dtype param_dtype,
                                      uint64_t* bytes);
  /* ---- minor 2 ends here ---- */
} dscore_model_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_MODEL_H_ */
