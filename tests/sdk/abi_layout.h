/* One row per struct, field and constant of an ABI version's headers, as
 * laid out by the compiler: what abi_layout.c records for one set of
 * headers and abi_c_test.c compares across sets. */
#ifndef DSCORE_TESTS_SDK_ABI_LAYOUT_H_
#define DSCORE_TESTS_SDK_ABI_LAYOUT_H_

#include <stddef.h>

typedef struct dscore_abi_entry {
  const char* type;         /* struct name, or "constant" */
  const char* field;        /* field or constant name; "" for the struct itself */
  unsigned long long value; /* offset of the field, or the constant's value */
  size_t size;              /* sizeof the field or the struct; 0 for constants */
} dscore_abi_entry;

/* The headers of sdk/abi/v1.N and of sdk/include, each through the lists of
 * the minors it has. */
const dscore_abi_entry* dscore_abi_layout_frozen_v1_0(size_t* count);
const dscore_abi_entry* dscore_abi_layout_frozen_v1_1(size_t* count);
const dscore_abi_entry* dscore_abi_layout_current(size_t* count);

#endif
