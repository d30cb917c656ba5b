/* A shared library that is not a dscore plugin: it exports a function, but
 * not dscore_plugin_library_v1. The host must say so, not crash. */
__attribute__((visibility("default"))) int not_a_dscore_plugin(void) { return 42; }
