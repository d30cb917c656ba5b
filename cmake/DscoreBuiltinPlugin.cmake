# dscore_builtin_plugin(<target> SOURCES ... [LIBS <third-party targets>])
# A plugin shipped with dscore: built exactly as a vendor's plugin (through
# dscore_add_plugin), placed in the build tree's plugin folder and installed
# into the install prefix's.
function(dscore_builtin_plugin target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  dscore_add_plugin(${target} ${ARG_SOURCES})
  if(ARG_LIBS)
    target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${DSCORE_PLUGIN_OUTPUT_DIR})
  install(TARGETS ${target} LIBRARY DESTINATION ${DSCORE_PLUGIN_SUBDIR})
  set_property(GLOBAL APPEND PROPERTY DSCORE_BUILTIN_PLUGINS ${target})
endfunction()

# Plugins include only sdk/ and link no dscore library: fail the configure
# step if a plugin target links anything named dscore_* (other than the sdk).
function(dscore_check_plugin_links)
  get_property(plugins GLOBAL PROPERTY DSCORE_BUILTIN_PLUGINS)
  foreach(p IN LISTS plugins)
    get_target_property(libs ${p} LINK_LIBRARIES)
    foreach(lib IN LISTS libs)
      if(lib MATCHES "^dscore(::|_)" AND NOT lib MATCHES "^dscore(::|_)sdk$")
        message(FATAL_ERROR "plugin ${p} links ${lib}: plugins may link only dscore::sdk "
                            "and their own third-party libraries (docs/architecture.md#layers)")
      endif()
    endforeach()
  endforeach()
  add_custom_target(dscore_plugins ALL)
  if(plugins)
    add_dependencies(dscore_plugins ${plugins})
  endif()
endfunction()
