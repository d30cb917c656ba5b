# dscore_device_ops (core/device/ops.h): the ZeRO step's buffer operations
# on the host or a CUDA stream. Kept in its own file, included from
# core/device/CMakeLists.txt, beside the device library (memory, streams,
# events).
#
# Layering: the CPU backend IS the host code of core/tensor (dtype_ops.h,
# square_sum.h), so the folder declares tensor beside the device library's
# base (the layering check takes the union of a folder's entries).
set(_dscore_ops_sources ops.cc ops_cpu.cc)
if(DSCORE_WITH_CUDA_ENABLED)
  list(APPEND _dscore_ops_sources ops_cuda.cu)
endif()
add_library(dscore_device_ops STATIC ${_dscore_ops_sources})
add_library(dscore::device_ops ALIAS dscore_device_ops)
target_include_directories(dscore_device_ops PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
target_link_libraries(dscore_device_ops PUBLIC dscore::sdk dscore_tensor)
if(DSCORE_WITH_CUDA_ENABLED)
  target_compile_definitions(dscore_device_ops PRIVATE DSCORE_DEVICE_OPS_WITH_CUDA)
  target_link_libraries(dscore_device_ops PUBLIC CUDA::cudart_static)
  # C++17 for the .cu file (CMake 3.25 does not know nvcc's C++20 flag).
  # --fmad=false: no multiply-add contraction anywhere in the kernels, on
  # top of the explicitly rounded intrinsics they use.
  set_target_properties(dscore_device_ops PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_compile_options(dscore_device_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
endif()
set_property(GLOBAL APPEND PROPERTY DSCORE_CORE_LIBRARIES "device:base,tensor")
