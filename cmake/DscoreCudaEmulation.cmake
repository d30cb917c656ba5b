# DSCORE_CUDA_EMULATION=ON (the `emulated` preset): every CUDA target is
# built for the CPU emulation of CUDA (tests/cuda_emulation) instead of by
# nvcc, so the gpu-labelled tests run on a machine without a GPU
# (`ctest --preset emulated -L gpu`): the CUDA language stays off, the
# toolkit's headers are used, CUDA::cudart_static, CUDA::cublas and NCCL are
# the emulation library, and dscore_emulate_cuda_targets() (called at the
# end of the top level) rewrites each target's .cu sources into C++.
find_program(DSCORE_NVCC nvcc)  # its toolkit's headers, where it is on PATH
get_filename_component(_nvcc_root "${DSCORE_NVCC}/../.." ABSOLUTE)
find_path(DSCORE_CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${_nvcc_root} ENV CUDA_HOME /usr/local/cuda
          PATH_SUFFIXES include REQUIRED)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${DSCORE_CUDA_INCLUDE_DIR} ENV NCCL_HOME
          PATH_SUFFIXES include REQUIRED)
set(DSCORE_CUDA_INCLUDE_DIRS ${DSCORE_CUDA_INCLUDE_DIR})
set(CUDAToolkit_INCLUDE_DIRS ${DSCORE_CUDA_INCLUDE_DIR})
include(${PROJECT_SOURCE_DIR}/tests/cuda_emulation/runtime.cmake)
target_include_directories(cuda_emulation PUBLIC ${NCCL_INCLUDE_DIR})
add_library(CUDA::cudart_static ALIAS cuda_emulation)
add_library(CUDA::cudart ALIAS cuda_emulation)
add_library(CUDA::cublas ALIAS cuda_emulation)
set(NCCL_LIBRARY cuda_emulation)

# The targets of `dir` and of every folder below it.
function(_dscore_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _dscore_targets_below(${sub} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Each target's .cu sources as C++ for the emulation (dscore_emulated_cuda).
function(dscore_emulate_cuda_targets)
  _dscore_targets_below(${PROJECT_SOURCE_DIR} targets)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
      continue()
    endif()
    get_target_property(sources ${target} SOURCES)
    get_target_property(source_dir ${target} SOURCE_DIR)
    set(kept "")
    set(cus "")
    foreach(s ${sources})
      if(s MATCHES "\\.cu$")
        if(NOT IS_ABSOLUTE ${s})
          set(s ${source_dir}/${s})
        endif()
        list(APPEND cus ${s})
      else()
        list(APPEND kept ${s})
      endif()
    endforeach()
    if(cus)
      set_property(TARGET ${target} PROPERTY SOURCES ${kept})
      dscore_emulated_cuda(${target} ${cus})
    endif()
  endforeach()
endfunction()
