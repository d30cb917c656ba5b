// The config and params types of the fake CUDA module (fake_cuda_module.cc)
// and its file names in the build tree.
#pragma once

namespace dscore::transformer::testing {

struct FakeConfig {
  int value = 0;  // < 0: the factory fails; else forward_backward() returns it
};
struct FakeParams {
  double unused = 0;
};

}  // namespace dscore::transformer::testing
