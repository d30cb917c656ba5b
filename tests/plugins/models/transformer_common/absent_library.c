/* The library one fake CUDA module needs and cannot find when it loads
 * (its SONAME is a cuBLAS one, libcublas.so.99, and nothing points at the
 * folder it is built in): what a missing cuBLAS looks like to dlopen. */
int dscore_fake_absent_library_symbol(void) { return 0; }
