/* The ABI checked from C: (1) every field and constant of each frozen
 * v1.N's headers has the same offset, size and value in the current headers
 * (structs only grow at the end), (2) every struct starts with struct_size,
 * (3) DSCORE_HAS_FIELD reads struct_size as documented. Exit status 0 = pass;
 * each failure prints one line. */
#include <dscore/optimizer.h>
#include <dscore/plugin.h>

#include <stdio.h>
#include <string.h>

#include "abi_layout.h"

static int g_failures = 0;

#define EXPECT(cond, ...)                    \
  do {                                       \
    if (!(cond)) {                           \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fprintf(stderr, "\n");                 \
      ++g_failures;                          \
    }                                        \
  } while (0)

static const dscore_abi_entry* find(const dscore_abi_entry* entries, size_t count,
                                    const dscore_abi_entry* key) {
  size_t i;
  for (i = 0; i < count; ++i)
    if (strcmp(entries[i].type, key->type) == 0 && strcmp(entries[i].field, key->field) == 0)
      return &entries[i];
  return NULL;
}

static void compare(const char* frozen_name, const dscore_abi_entry* frozen, size_t frozen_count,
                    const dscore_abi_entry* current, size_t current_count) {
  size_t i;
  EXPECT(frozen_count > 100, "%s: only %zu layout entries recorded", frozen_name, frozen_count);
  for (i = 0; i < frozen_count; ++i) {
    const dscore_abi_entry* f = &frozen[i];
    const dscore_abi_entry* c = find(current, current_count, f);
    EXPECT(c != NULL, "%s: %s.%s missing from the current headers", frozen_name, f->type, f->field);
    if (c == NULL) continue;
    if (strcmp(f->type, "constant") == 0) {
      EXPECT(c->value == f->value, "%s: constant %s changed from %llu to %llu", frozen_name,
             f->field, f->value, c->value);
    } else if (f->field[0] == '\0') {
      EXPECT(c->size >= f->size, "%s: struct %s shrank from %zu to %zu bytes", frozen_name, f->type,
             f->size, c->size);
    } else {
      EXPECT(c->value == f->value && c->size == f->size,
             "%s: %s.%s moved or resized: offset %llu size %zu, now offset %llu size %zu",
             frozen_name, f->type, f->field, f->value, f->size, c->value, c->size);
      if (strcmp(f->field, "struct_size") == 0)
        EXPECT(c->value == 0 && c->size == 4, "%s does not begin with uint32_t struct_size",
               f->type);
    }
  }
}

int main(void) {
  size_t frozen_count = 0, current_count = 0;
  const dscore_abi_entry* frozen = dscore_abi_layout_frozen_v1_0(&frozen_count);
  const dscore_abi_entry* current = dscore_abi_layout_current(&current_count);
  dscore_optimizer_state_slot slot;

  compare("v1.0", frozen, frozen_count, current, current_count);
  frozen = dscore_abi_layout_frozen_v1_1(&frozen_count);
  compare("v1.1", frozen, frozen_count, current, current_count);

  EXPECT(sizeof(dscore_status) == 4, "dscore_status is %zu bytes, not 4", sizeof(dscore_status));
  EXPECT(DSCORE_STATUS_MAX == DSCORE_DATA_LOSS, "DSCORE_STATUS_MAX is not the last code");

  /* DSCORE_HAS_FIELD: a struct_size ending just before a field hides it. */
  memset(&slot, 0, sizeof slot);
  slot.struct_size = (uint32_t)offsetof(dscore_optimizer_state_slot, initial_value);
  EXPECT(!DSCORE_HAS_FIELD(&slot, dscore_optimizer_state_slot, initial_value),
         "DSCORE_HAS_FIELD sees a field past struct_size");
  EXPECT(DSCORE_HAS_FIELD(&slot, dscore_optimizer_state_slot, elements_per_param),
         "DSCORE_HAS_FIELD misses a covered field");
  slot.struct_size = (uint32_t)sizeof slot;
  EXPECT(DSCORE_HAS_FIELD(&slot, dscore_optimizer_state_slot, initial_value),
         "DSCORE_HAS_FIELD misses the last field at full size");

  if (g_failures == 0)
    printf("sdk ABI: %zu v1.0 entries match the current headers\n", frozen_count);
  return g_failures == 0 ? 0 : 1;
}
