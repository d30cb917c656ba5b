/* Records the layout of every ABI 1.x struct field and constant (1.0's, and
 * each later frozen minor's additions the headers have) for the
 * headers on this translation unit's include path (the frozen copy or the
 * current sdk; CMake compiles it once per set, naming the function with
 * DSCORE_ABI_LAYOUT_FN). */
#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/offload.h>
#include <dscore/optimizer.h>
#include <dscore/plugin.h>
#include <dscore/scheduler.h>

#include "abi_layout.h"

#define DSCORE_ABI_STRUCT(type) {#type, "", 0, sizeof(type)},
#define DSCORE_ABI_FIELD(type, field) \
  {#type, #field, offsetof(type, field), sizeof(((type*)0)->field)},
#define DSCORE_ABI_CONSTANT(name) {"constant", #name, (unsigned long long)(name), 0},

static const dscore_abi_entry kEntries[] = {
#include "abi_v1_0_layout.inc"
#if DSCORE_ABI_VERSION_MINOR >= 1
#include "abi_v1_1_layout.inc"
#endif
#if DSCORE_ABI_VERSION_MINOR >= 2
#include "abi_v1_2_layout.inc"
#endif
};

const dscore_abi_entry* DSCORE_ABI_LAYOUT_FN(size_t* count) {
  *count = sizeof(kEntries) / sizeof(kEntries[0]);
  return kEntries;
}
