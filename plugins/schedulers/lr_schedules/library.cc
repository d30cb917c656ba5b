// The dscore-lr-schedules library: DeepSpeed's LR schedules
// (deepspeed/runtime/lr_schedules.py, docs/deepspeed-reference.md#lr-schedules). Each schedule
// lives in its own file; this table lists them.
#include "schedule.h"

namespace dscore::lr_schedules {
namespace {

const dscore_plugin_descriptor* const kPlugins[] = {
    &kWarmupLrDescriptor,
    &kWarmupDecayLrDescriptor,
    &kWarmupCosineLrDescriptor,
    &kOneCycleDescriptor,
    &kLrRangeTestDescriptor,
};

const dscore_plugin_library kLibrary = sdk::plugin_library("dscore-lr-schedules", "0.1.0", "dscore", kPlugins);

}  // namespace
}  // namespace dscore::lr_schedules

DSCORE_PLUGIN_ENTRY(dscore::lr_schedules::kLibrary)
