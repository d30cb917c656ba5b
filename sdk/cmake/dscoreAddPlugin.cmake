# dscore_add_plugin(<target> <sources>...)
# Build a dscore plugin: a MODULE library that sees only the sdk headers,
# compiles with hidden visibility and exports exactly one symbol,
# dscore_plugin_library_v1 (a linker version script hides everything else,
# inline C++ included). It must not depend on the host: undefined symbols
# are a link error (-z defs), so a plugin can never link a dscore library by
# accident; everything it needs from the host comes in dscore_host_api.
# Used for the built-in plugins and by vendors through find_package(dscore).
set(_DSCORE_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/dscore_plugin.map")

function(dscore_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE dscore::sdk)
  set_target_properties(${target} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${_DSCORE_PLUGIN_MAP})
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${_DSCORE_PLUGIN_MAP}"
    "LINKER:-z,defs")
endfunction()
