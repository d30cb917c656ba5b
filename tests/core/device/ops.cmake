# core/device/ops.h: the dispatch and the CPU backend everywhere; the CUDA
# backend against the CPU one where a GPU is present (label gpu). Kept in
# its own file, included from this folder's CMakeLists.txt beside the
# device library's tests.
dscore_test(device_ops_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops_test.cc LIBS dscore::device_ops)
if(DSCORE_WITH_CUDA_ENABLED)
  dscore_test(device_ops_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops_cuda_test.cc
              LIBS dscore::device_ops CUDA::cudart LABELS gpu)
endif()
