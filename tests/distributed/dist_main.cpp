// The distributed tests run as every rank of one mpirun job (and alone, as a
// world of one): the process group starts before Catch and ends after it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "distributed/process_group.h"

int main(int argc, char** argv) {
  mt::dist::init_process_group();
  const int failed = Catch::Session().run(argc, argv);
  mt::dist::finalize();
  return failed == 0 ? 0 : 1;
}
