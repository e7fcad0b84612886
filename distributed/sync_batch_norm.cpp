#include "distributed/sync_batch_norm.h"

#include "nn/layers.h"

namespace mt::dist {

int convert_sync_batchnorm(nn::Module& model, ProcessGroup* group) {
  int converted = 0;
  if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&model)) {
    bn->sync_statistics([group](const Tensor& t) {
      ProcessGroup& ranks = group != nullptr ? *group : group_for(t.device());  // NCCL for CUDA tensors
      ranks.all_reduce(t, ReduceOp::Sum)->wait();
    });
    ++converted;
  }
  for (const auto& [name, child] : model.children()) converted += convert_sync_batchnorm(*child, group);
  return converted;
}

}  // namespace mt::dist
