// FP8 under data parallel (distributed/fp8.h): with delayed scaling every
// rank must end a step with the same scales, although each saw other data.
#include "distributed/dist_test_util.h"
#include "distributed/fp8.h"

using namespace mt;

TEST_CASE("delayed FP8 scales agree on every rank after the amax reduction (bug: amax not reduced over ranks)",
          "[fp8]") {
  dist::ProcessGroup& world = dist::world();
  const int rank = world.rank(), size = world.size();
  manual_seed(7);
  nn::Linear layer(12, 4);  // the same weights on every rank
  amp::Fp8State fp8(amp::Fp8Recipe::delayed_scaling({4, amp::AmaxAlgo::Max, 0}));
  // Rank r's batch has max |x| = r + 1: only the max over the ranks (= size) is the same everywhere.
  const Tensor x = full({3, 12}, static_cast<double>(rank + 1));
  {
    amp::Fp8Autocast region(fp8);
    sum(layer.forward(x)).backward();
  }
  dist::reduce_fp8_amaxes(fp8, world);
  fp8.update();
  const std::map<std::string, Tensor> state = fp8.state_dict(layer);
  const float input_scale = state.at("weight.input.scale").item<float>();
  CHECK(input_scale == 448.0f / static_cast<float>(size));
  // Every scale (input, weight, gradient) equal to rank 0's.
  for (const auto& [name, t] : state) {
    if (name.find(".scale") == std::string::npos) continue;
    INFO(name);
    Tensor mine = t.reshape({1}).clone();
    Tensor all = zeros({size});
    world.all_gather(all, mine)->wait();
    const std::vector<double> v = all.to_vector();
    for (double s : v) CHECK(s == v[0]);
  }
}
