/* dscore plugin ABI v1: learning-rate schedulers (DSCORE_KIND_SCHEDULER).
 *
 * A scheduler is a pure function from the iteration counter t to the
 * learning rate (and optionally momentum) of each parameter group. The HOST
 * owns t (DeepSpeed's last_batch_iteration): it starts at first_iteration()
 * (normally -1), the value at t = -1 is applied before the first update (as a
 * DeepSpeed scheduler's constructor does), and t advances by one after every
 * APPLIED optimizer update, never after an fp16-overflow-skipped one. The
 * host saves t in checkpoints, so most schedulers keep no state of their own.
 *
 * Named in ds_config.json as {"scheduler": {"type": "<name>", "params": {...}}}.
 */
#ifndef DSCORE_SCHEDULER_H_
#define DSCORE_SCHEDULER_H_

#include "optimizer.h" /* DSCORE_HPARAM_* bits */
#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dscore_scheduler dscore_scheduler;

/* What the optimizer it drives looks like, for schedulers that need it. */
typedef struct dscore_scheduler_context {
  uint32_t struct_size;
  size_t group_count;     /* number of optimizer parameter groups (>= 1) */
  const double* base_lrs; /* group_count entries: the optimizer's configured lr */
  int64_t total_steps;    /* the run's planned optimizer steps, or -1 if unknown */
} dscore_scheduler_context;

/* One point of the schedule for one group. The plugin sets set_mask to say
 * which fields it provides: DSCORE_HPARAM_LR always; BETA1/BETA2 only when
 * it cycles momentum. Fields not in the mask keep the optimizer's values. */
typedef struct dscore_schedule_point {
  uint32_t struct_size;
  uint32_t set_mask;
  double lr;
  double beta1;
  double beta2;
} dscore_schedule_point;

typedef struct dscore_scheduler_vtable {
  uint32_t struct_size;

  /* Required. Validated params plus the optimizer context (borrowed). A
   * parameter given per group (a list) must have context->group_count
   * entries; answer INVALID_ARGUMENT naming the parameter otherwise. */
  dscore_status (*create)(const dscore_create_args* args, const dscore_scheduler_context* context,
                          dscore_scheduler** out);

  /* Required. */
  void (*destroy)(dscore_scheduler* self);

  /* Required. The schedule at iteration t (t >= first_iteration()) for group
   * `group`. Must be a pure function of (params, context, t, group); may be
   * called for any t in any order (`dscore lr-schedule` previews). The host
   * sets out->struct_size; the plugin fills the rest. */
  dscore_status (*point_at)(const dscore_scheduler* self, int64_t t, size_t group,
                            dscore_schedule_point* out);

  /* Optional. The counter at construction (DeepSpeed's last_batch_iteration
   * param). NULL means -1. */
  int64_t (*first_iteration)(const dscore_scheduler* self);

  /* Optional, as in optimizer.h: opaque extra state for checkpoints. */
  dscore_status (*save_extra_state)(const dscore_scheduler* self, dscore_write_fn write, void* ctx);
  dscore_status (*load_extra_state)(dscore_scheduler* self, const void* data, size_t size);
  /* ---- minor 0 ends here ---- */
} dscore_scheduler_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_SCHEDULER_H_ */
