# dscore_core_library(<name> SOURCES ... [DEPS <core libs>] [EXTERNAL <targets>])
# One static library per core/ folder. DEPS lists the other core libraries it
# may include (by short name: base, config, ...); the layering check
# (tests/layering/layering_test.cc) verifies every `#include "core/<x>/..."` against
# this list, using the manifest written by dscore_write_layering_manifest().
function(dscore_core_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;EXTERNAL" ${ARGN})
  set(target dscore_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(dscore::${name} ALIAS ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_link_libraries(${target} PUBLIC dscore::sdk)
  foreach(dep IN LISTS ARG_DEPS)
    target_link_libraries(${target} PUBLIC dscore_${dep})
  endforeach()
  if(ARG_EXTERNAL)
    target_link_libraries(${target} PRIVATE ${ARG_EXTERNAL})
  endif()
  # One manifest entry per library: "name:dep1,dep2" (commas, so the list
  # stays one item of the global property).
  string(REPLACE ";" "," deps_text "${ARG_DEPS}")
  set_property(GLOBAL APPEND PROPERTY DSCORE_CORE_LIBRARIES "${name}:${deps_text}")
endfunction()

function(dscore_write_layering_manifest)
  get_property(libs GLOBAL PROPERTY DSCORE_CORE_LIBRARIES)
  set(text "")
  foreach(entry IN LISTS libs)
    string(APPEND text "${entry}\n")
  endforeach()
  file(WRITE ${PROJECT_BINARY_DIR}/layering_manifest.txt "${text}")
endfunction()
