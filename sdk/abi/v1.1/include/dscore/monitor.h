/* dscore plugin ABI v1: monitors (DSCORE_KIND_MONITOR).
 *
 * A monitor receives training scalars (loss, lr, loss scale, timers) and
 * writes them somewhere: CSV files, TensorBoard event files, a WandB run.
 * Tags and x-axis follow DeepSpeed ("Train/Samples/train_loss" at
 * global_samples). The host creates monitors on global rank 0 only.
 *
 * Named in ds_config.json by its section: "csv_monitor", "tensorboard" and
 * "wandb" sections create the plugins of those names (the section minus
 * "enabled" is the params object); other monitors are listed in
 * {"plugins": {"monitors": [{"type": "<name>", "params": {...}}]}}.
 *
 * Failure rules: an error from create() stops the run at start-up (the user
 * asked for output that cannot be written). An error from write_scalars or
 * flush is logged by the host, which then stops calling that monitor; training
 * goes on.
 */
#ifndef DSCORE_MONITOR_H_
#define DSCORE_MONITOR_H_

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dscore_monitor dscore_monitor;

typedef struct dscore_scalar_event {
  uint32_t struct_size;
  const char* tag; /* "Train/Samples/train_loss" */
  double value;
  int64_t step;     /* the x-axis value: global_samples, as DeepSpeed */
  double wall_time; /* seconds since the Unix epoch when the value was taken */
} dscore_scalar_event;

typedef struct dscore_monitor_vtable {
  uint32_t struct_size;

  /* Required. Open the output (create directories, files). */
  dscore_status (*create)(const dscore_create_args* args, dscore_monitor** out);

  /* Required. Flush and close everything. Never fails. */
  void (*destroy)(dscore_monitor* self);

  /* Required. Record `count` events (borrowed). Events of one call share a
   * step and are in the order the host produced them. */
  dscore_status (*write_scalars)(dscore_monitor* self, const dscore_scalar_event* const* events,
                                 size_t count);

  /* Optional. Make everything written so far durable/visible. */
  dscore_status (*flush)(dscore_monitor* self);

  /* Optional. Called once after create() with the fully resolved config as
   * JSON text, for monitors that store run metadata (WandB's config). */
  dscore_status (*write_config)(dscore_monitor* self, const char* resolved_config_json);
  /* ---- minor 0 ends here ---- */
} dscore_monitor_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_MONITOR_H_ */
