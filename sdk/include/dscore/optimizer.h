/* dscore plugin ABI v1: optimizers (DSCORE_KIND_OPTIMIZER).
 *
 * An optimizer updates parameters from gradients. It does NOT own its state:
 * it declares state slots (Adam: exp_avg fp32 x1, exp_avg_sq fp32 x1) and the
 * host allocates, partitions across ZeRO ranks, offloads, swaps and
 * checkpoints them, handing them to step() as tensors. That is what lets any
 * vendor optimizer run under every ZeRO stage, CPU/NVMe offload and resume.
 *
 * Named in ds_config.json as {"optimizer": {"type": "<name>", "params": {...}}}.
 * If the params schema declares a number "lr", the host treats it as the base
 * learning rate of every parameter group: the LR scheduler starts from it and
 * step() receives the scheduled value in hparams->lr.
 */
#ifndef DSCORE_OPTIMIZER_H_
#define DSCORE_OPTIMIZER_H_

#include "model.h"
#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque instance, defined by the plugin. */
typedef struct dscore_optimizer dscore_optimizer;

/* Capability bit (descriptor->capabilities): step() must see each parameter
 * whole (e.g. LAMB's per-tensor trust ratio), so the host may not hand it
 * ZeRO partitions that split a tensor. Without it, tensors may be 1-D slices
 * of parameters and step() must be element-wise. */
#define DSCORE_CAP_OPTIMIZER_WHOLE_TENSORS ((uint64_t)1 << 24)

/* One declared piece of per-element state. */
typedef struct dscore_optimizer_state_slot {
  uint32_t struct_size;
  const char* name;            /* "exp_avg": unique in this optimizer; used as the checkpoint key */
  dscore_dtype dtype;          /* storage type; DSCORE_DTYPE_F32 for Adam's moments */
  uint32_t elements_per_param; /* state elements per parameter element (Adam: 1) */
  double initial_value;        /* the host fills new state with this value (Adam: 0) */
} dscore_optimizer_state_slot;

/* Bits of dscore_optimizer_hparams.override_mask and
 * dscore_schedule_point.set_mask. */
#define DSCORE_HPARAM_LR (1u << 0)
#define DSCORE_HPARAM_BETA1 (1u << 1) /* momentum / Adam beta1 */
#define DSCORE_HPARAM_BETA2 (1u << 2)

/* Hyper-parameters of one step() call (one parameter group). */
typedef struct dscore_optimizer_hparams {
  uint32_t struct_size;
  double lr;              /* the scheduled learning rate for this update */
  uint32_t override_mask; /* DSCORE_HPARAM_BETA1/BETA2: use beta1/beta2 below
                             instead of the configured values (OneCycle) */
  double beta1;
  double beta2;
  double weight_decay_multiplier; /* 1 normally; 0 for parameters the model marks
                                     DSCORE_PARAM_NO_WEIGHT_DECAY */
  int64_t step;                   /* 1-based count of applied updates of this group,
                                     this one included (skipped fp16 steps not counted) */
  double grad_scale;              /* multiply every gradient by this before use; it
                                     folds loss-scale removal and clipping into one
                                     factor (1 when neither applies) */
  /* ---- minor 0 ends here ---- */
  uint32_t group_flags; /* ABI 1.2: DSCORE_OPTIMIZER_GROUP_* */
} dscore_optimizer_hparams;

/* ABI 1.2. Bit of dscore_optimizer_hparams.group_flags: the group holds
 * parameters that preconditions() claimed, and their gradients are what
 * precondition() wrote. */
#define DSCORE_OPTIMIZER_GROUP_PRECONDITIONED (1u << 0)

/* ABI 1.2, PROVISIONAL: one whole parameter for precondition(). */
typedef struct dscore_optimizer_precondition_args {
  uint32_t struct_size;
  const dscore_optimizer_hparams* hparams; /* the coming update's (lr, step, group_flags) */
  const dscore_model_param* param;         /* name and shape (this rank's, under tensor
                                              parallelism) */
  /* F32, the parameter's shape. In: its averaged gradient, loss scale
   * removed (and at ZeRO stage 0 clipped). Out: what the norm, clipping and
   * step() take as its gradient. */
  dscore_tensor* grad;
  dscore_tensor* state; /* slot 0 of the whole parameter (F32), updated in place */
  void* stream;         /* PROVISIONAL: NULL for CPU tensors */
} dscore_optimizer_precondition_args;

/* One step over a group of tensors that share hyper-parameters. All arrays
 * have tensor_count entries (states: slot_count * tensor_count). Tensors are
 * dense; params[i], grads[i] and every state of tensor i have the same numel
 * (times elements_per_param for states). */
typedef struct dscore_optimizer_step_args {
  uint32_t struct_size;
  const dscore_optimizer_hparams* hparams;
  size_t tensor_count;
  dscore_tensor* const* params;      /* master weights, updated in place (usually fp32) */
  const dscore_tensor* const* grads; /* gradients, any float dtype the plugin accepts */
  size_t slot_count;                 /* as declared by state_slots() */
  dscore_tensor* const* states;      /* states[s * tensor_count + i] = slot s of tensor i */
  /* Optional (may be NULL): tensor_count 16-bit tensors to receive the
   * updated parameters converted to their dtype in the same pass (the
   * model's 16-bit copy). A plugin that does not fuse this returns
   * DSCORE_UNIMPLEMENTED when it is non-NULL and the host converts instead. */
  dscore_tensor* const* params_16bit;
  void* stream; /* PROVISIONAL: cudaStream_t for CUDA tensors, NULL for CPU */
} dscore_optimizer_step_args;

typedef struct dscore_optimizer_vtable {
  uint32_t struct_size;

  /* Required. Build an instance from validated params. On error return a
   * status (message via host->set_error) and leave *out untouched. */
  dscore_status (*create)(const dscore_create_args* args, dscore_optimizer** out);

  /* Required. Release everything create() made. Never fails. */
  void (*destroy)(dscore_optimizer* self);

  /* Required. The state slots this instance needs, in a stable order. The
   * array and strings stay valid until destroy(). May depend on params (SGD
   * without momentum declares none: *count = 0). */
  dscore_status (*state_slots)(const dscore_optimizer* self,
                               const dscore_optimizer_state_slot* const** slots, size_t* count);

  /* Required. Apply one update. Called once per parameter group per applied
   * update, from one thread at a time; the plugin may use threads inside.
   * For CUDA tensors: enqueue on `stream` and return. Must not keep
   * pointers to the tensors after returning. */
  dscore_status (*step)(dscore_optimizer* self, const dscore_optimizer_step_args* args);

  /* Optional. State that is not per-element (e.g. a phase flag) for
   * checkpoints: write opaque bytes through `write`, read them back in
   * load_extra_state. NULL when the optimizer keeps no such state. */
  dscore_status (*save_extra_state)(const dscore_optimizer* self, dscore_write_fn write, void* ctx);
  dscore_status (*load_extra_state)(dscore_optimizer* self, const void* data, size_t size);

  /* Optional. Whether the host should reduce (average across data-parallel
   * ranks) the gradients it passes to the update numbered `step` (1-based,
   * as hparams->step). Return 0 when the optimizer communicates gradients
   * itself for that update (OneBitAdam's compressed phase, through
   * host->communicator(ctx, DSCORE_GROUP_DATA_PARALLEL)): step() then
   * receives this rank's local gradients.
   * NULL means always 1. Only meaningful without ZeRO partitioning (stage 0);
   * the host refuses an optimizer that returns 0 under ZeRO stages 1-3. */
  int32_t (*wants_reduced_gradients)(const dscore_optimizer* self, int64_t step);
  /* ---- minor 0 ends here ---- */

  /* Optional (ABI 1.2, PROVISIONAL), both or neither: an update that needs
   * each of some parameters whole (Muon orthogonalizes a weight matrix's
   * momentum). preconditions() says whether `param` takes it (asked once per
   * parameter at start). Before every applied update the host gathers each
   * such parameter's whole gradient and slot 0 (which must be F32, one
   * element per parameter element) across the ZeRO ranks, calls
   * precondition() and keeps this rank's part of both. It runs where
   * DeepSpeed runs Muon's: before the gradient norm at ZeRO stages 1-3 (the
   * norm and clipping see what precondition() wrote), after clipping at
   * stage 0. step() receives those parameters in groups flagged
   * DSCORE_OPTIMIZER_GROUP_PRECONDITIONED. */
  int32_t (*preconditions)(const dscore_optimizer* self, const dscore_model_param* param);
  dscore_status (*precondition)(dscore_optimizer* self,
                                const dscore_optimizer_precondition_args* args);
} dscore_optimizer_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_OPTIMIZER_H_ */
