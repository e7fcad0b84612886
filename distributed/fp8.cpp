#include "distributed/fp8.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace mt::dist {

void reduce_fp8_amaxes(const amp::Fp8State& state, ProcessGroup& group) {
  const std::vector<Tensor> amaxes = state.amaxes_to_reduce();
  if (group.size() == 1 || amaxes.empty()) return;
  NoGradGuard no_grad;
  const Tensor packed = cat(amaxes, 0);  // one collective for every history
  group.all_reduce(packed, ReduceOp::Max)->wait();
  for (size_t i = 0; i < amaxes.size(); ++i) copy_(amaxes[i], packed.narrow(0, static_cast<int64_t>(i), 1));
}

}  // namespace mt::dist
