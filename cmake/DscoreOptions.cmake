# Build options, warnings, ccache and detection of the optional accelerator
# and transport libraries (CUDA, MPI, NCCL). Each option is AUTO (use it when
# found), ON (required) or OFF. NCCL (which needs CUDA) builds the nccl comm
# plugin (plugins/comm/nccl); it is linked as a shared library, found under
# the CUDA toolkit or NCCL_HOME. oneDNN (libdnnl-dev) gives the decoder
# models' CPU kernels a bf16 GEMM (plugins/models/transformer_common/cpu/gemm_bf16.h);
# only those kernels link it.
set(DSCORE_WITH_CUDA AUTO CACHE STRING "Build CUDA code: AUTO, ON or OFF")
set(DSCORE_WITH_MPI AUTO CACHE STRING "Build the MPI comm plugin: AUTO, ON or OFF")
set(DSCORE_WITH_NCCL AUTO CACHE STRING "Build the NCCL comm plugin (needs CUDA): AUTO, ON or OFF")
set(DSCORE_WITH_ONEDNN AUTO CACHE STRING "Use oneDNN for the CPU bf16 GEMM: AUTO, ON or OFF")
option(DSCORE_WERROR "Treat warnings as errors" OFF)

find_program(DSCORE_CCACHE ccache)
if(DSCORE_CCACHE)
  # The test targets use a precompiled header (tests/CMakeLists.txt):
  # ccache caches a compile that uses one only with this sloppiness.
  set(CMAKE_C_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros
      ${DSCORE_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_C_COMPILER_LAUNCHER})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${DSCORE_CCACHE})
endif()

add_compile_options(
  "$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra>"
  "$<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${DSCORE_WERROR}>>:-Werror>")

# GCC 12 reports bogus -Wrestrict inside libstdc++'s std::string at -O3
# (GCC PR 105329); it is not about our code.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>")
endif()

# Sanitizers are chosen by presets through DSCORE_SANITIZE (e.g. "address,undefined").
set(DSCORE_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined or thread")
if(DSCORE_SANITIZE)
  add_compile_options(-fsanitize=${DSCORE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DSCORE_SANITIZE})
endif()
set(DSCORE_TSAN OFF)
if(DSCORE_SANITIZE MATCHES "(^|,)thread(,|$)")
  set(DSCORE_TSAN ON)
endif()

# dscore_tsan_runtime(<executable>): in a TSan build, link tests/tsan's
# serial-TBB object into an executable so TBB's uninstrumented worker
# hand-offs do not drown dscore's own races; nothing otherwise.
function(dscore_tsan_runtime target)
  if(DSCORE_TSAN)
    target_link_libraries(${target} PRIVATE dscore_tsan_serial_tbb)
  endif()
endfunction()

function(_dscore_resolve_option name found)
  if(${name} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${name}=ON but the library was not found; install it or set ${name}=OFF")
  endif()
  if(${name} STREQUAL "OFF")
    set(${name}_ENABLED FALSE PARENT_SCOPE)
  else()
    set(${name}_ENABLED ${${found}} PARENT_SCOPE)
  endif()
endfunction()

# CUDA: compile for Hopper (sm_90) unless told otherwise; or, with
# DSCORE_CUDA_EMULATION, for the CPU emulation of CUDA
# (cmake/DscoreCudaEmulation.cmake).
option(DSCORE_CUDA_EMULATION "Build the CUDA code for the CPU emulation of CUDA, not nvcc" OFF)
set(_dscore_cuda_found FALSE)
if(DSCORE_CUDA_EMULATION)
  include(${CMAKE_CURRENT_LIST_DIR}/DscoreCudaEmulation.cmake)
  set(_dscore_cuda_found TRUE)
elseif(NOT DSCORE_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    set(_dscore_cuda_found ${CUDAToolkit_FOUND})
  endif()
endif()
_dscore_resolve_option(DSCORE_WITH_CUDA _dscore_cuda_found)

set(_dscore_mpi_found FALSE)
if(NOT DSCORE_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  set(_dscore_mpi_found ${MPI_C_FOUND})
endif()
_dscore_resolve_option(DSCORE_WITH_MPI _dscore_mpi_found)

set(_dscore_nccl_found FALSE)
if(DSCORE_CUDA_EMULATION)
  set(_dscore_nccl_found TRUE)  # NCCL_INCLUDE_DIR and NCCL_LIBRARY: DscoreCudaEmulation.cmake
elseif(NOT DSCORE_WITH_NCCL STREQUAL "OFF" AND DSCORE_WITH_CUDA_ENABLED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  # The shared library only: the plugin takes libnccl.so.2 from the machine
  # it runs on (a system NCCL or PyTorch's nvidia/nccl/lib).
  find_library(NCCL_LIBRARY NAMES libnccl.so nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME
               PATH_SUFFIXES lib lib64 ../lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(_dscore_nccl_found TRUE)
  endif()
endif()
_dscore_resolve_option(DSCORE_WITH_NCCL _dscore_nccl_found)

# oneDNN as Debian builds it (OpenMP runtime: the kernels that call it set
# each calling thread's OpenMP team to one, hence libgomp beside it).
set(_dscore_onednn_found FALSE)
if(NOT DSCORE_WITH_ONEDNN STREQUAL "OFF")
  find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(DNNL_LIBRARY dnnl)
  if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND EXISTS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h)
    file(STRINGS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h _dnnl_runtime
         REGEX "#define DNNL_CPU_RUNTIME ")
    if(_dnnl_runtime MATCHES "DNNL_RUNTIME_OMP")
      set(_dscore_onednn_found TRUE)
    else()
      message(STATUS "oneDNN at ${DNNL_LIBRARY} does not use OpenMP (${_dnnl_runtime}); not used")
    endif()
  endif()
endif()
_dscore_resolve_option(DSCORE_WITH_ONEDNN _dscore_onednn_found)

function(dscore_print_summary)
  message(STATUS "dscore ${PROJECT_VERSION}: CUDA=${DSCORE_WITH_CUDA_ENABLED} "
                 "MPI=${DSCORE_WITH_MPI_ENABLED} NCCL=${DSCORE_WITH_NCCL_ENABLED} "
                 "oneDNN=${DSCORE_WITH_ONEDNN_ENABLED} "
                 "sanitize='${DSCORE_SANITIZE}'")
endfunction()
