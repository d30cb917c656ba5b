// The dscore-lr-schedules library: DeepSpeed's LR schedules
// (deepspeed/runtime/lr_schedules.py, docs/deepspeed-reference.md#lr-schedules). Each schedule
// lives in its own file; this table lists them.
#include "schedule.h"

namespace ls = dscore::lr_schedules;
DSCORE_PLUGIN_LIBRARY("dscore-lr-schedules", "0.1.0", "dscore", &ls::kWarmupLrDescriptor,
                      &ls::kWarmupDecayLrDescriptor, &ls::kWarmupCosineLrDescriptor,
                      &ls::kOneCycleDescriptor, &ls::kLrRangeTestDescriptor)
