# The CPU emulation of CUDA as a library (include/cuda_emulation.h): the
# scheduler, the runtime API and its streams, cuBLAS's GEMMs and NCCL. Shared,
# so that a test, the plugins it loads and their CUDA modules share the
# emulated devices. Included by tests/cuda_emulation/CMakeLists.txt, and
# first thing by the top level in the `emulated` preset
# (cmake/DscoreCudaEmulation.cmake). Needs the CUDA toolkit's headers only.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/host_source.cmake)

find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
set(_emulation ${CMAKE_CURRENT_LIST_DIR})
add_library(cuda_emulation SHARED ${_emulation}/cuda_emulation.cc
            ${_emulation}/runtime_api.cc ${_emulation}/streams.cc ${_emulation}/cublas.cc ${_emulation}/nccl.cc
            ${_emulation}/nccl_board.cc)
target_include_directories(cuda_emulation PUBLIC ${_emulation}/include
                           ${DSCORE_CUDA_INCLUDE_DIRS})
target_link_libraries(cuda_emulation PRIVATE PkgConfig::OPENBLAS)  # cublas.cc
set_target_properties(cuda_emulation PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

# dscore_emulated_cuda(<target> <file.cu>...): adds each .cu to <target> as
# C++ for the emulation, and links the emulation.
function(dscore_emulated_cuda target)
  foreach(cu ${ARGN})
    get_filename_component(name ${cu} NAME_WE)
    set(cc ${PROJECT_BINARY_DIR}/emulated_cuda/${target}/${name}.cc)
    dscore_host_source(${cu} ${cc})
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${cu})
    target_sources(${target} PRIVATE ${cc})
    # The .cu's own folder for its quoted includes (the copy lies elsewhere).
    get_filename_component(dir ${cu} DIRECTORY)
    target_include_directories(${target} PRIVATE ${dir})
    # nvcc's #pragma unroll means nothing to g++.
    set_source_files_properties(${cc} TARGET_DIRECTORY ${target} PROPERTIES
                                SKIP_PRECOMPILE_HEADERS ON COMPILE_OPTIONS -Wno-unknown-pragmas)
  endforeach()
  target_link_libraries(${target} PRIVATE cuda_emulation)
endfunction()
