// The distributed tests run as every rank of one mpirun job (and alone, as a
// world of one): the process group starts before Catch and ends after it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstring>

#include "core/allocator.h"
#include "distributed/process_group.h"

namespace {
bool has_gpu() {
  try {
    mt::allocator_for(mt::kCUDA);
    return true;
  } catch (const mt::Error&) {
    return false;
  }
}
}  // namespace

int main(int argc, char** argv) {
  // The GPU tests' entry skips (77, CTest's SKIP_RETURN_CODE) where there is no GPU.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "[.gpu]") == 0 && !has_gpu()) return 77;
  }
  mt::dist::init_process_group();
  const int failed = Catch::Session().run(argc, argv);
  mt::dist::finalize();
  return failed == 0 ? 0 : 1;
}
