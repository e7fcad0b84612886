// End to end: a small MLP learns a synthetic classification task with plain
// SGD on the CPU, through every layer of mixtape below nn/.
#include <catch2/catch.hpp>
#include <numeric>

#include "models/demo_mlp.h"

TEST_CASE("an MLP learns a synthetic 3-class task with SGD", "[e2e]") {
  mt::models::DemoOptions options;
  options.steps = 400;
  options.seed = 11;
  const auto result = mt::models::train_demo_mlp(options);
  auto window_mean = [&](size_t begin) {
    return std::accumulate(result.losses.begin() + static_cast<long>(begin),
                           result.losses.begin() + static_cast<long>(begin) + 20, 0.0) / 20.0;
  };
  const double early = window_mean(0), late = window_mean(result.losses.size() - 20);
  INFO("mean loss of the first 20 steps " << early << ", of the last 20 " << late);
  CHECK(late < 0.5 * early);
  CHECK(result.test_accuracy > 0.85);  // a majority-class guess gets about 0.4
}

TEST_CASE("training is deterministic for a seed", "[e2e]") {
  mt::models::DemoOptions options;
  options.steps = 20;
  options.seed = 3;
  const auto a = mt::models::train_demo_mlp(options);
  const auto b = mt::models::train_demo_mlp(options);
  CHECK(a.losses == b.losses);
}
