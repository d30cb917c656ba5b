// dscore_config_reference: prints the generated config reference.
//   build/<dir>/bin/dscore_config_reference > docs/config-reference.md
#include <iostream>

#include "core/config/reference.h"

int main() {
  std::cout << dscore::config::config_reference_markdown();
  return std::cout.good() ? 0 : 1;
}
