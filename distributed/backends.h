// What the back ends of process_group.cpp share (not part of the API).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace mt::dist::detail {

// The header MT_DIST_DEBUG=1 exchanges before a collective: the collective,
// its reduction, its root, and the dtype and shape of this rank's own tensor.
using CollectiveHeader = std::array<int64_t, 12>;
CollectiveHeader collective_header(Collective what, ReduceOp op, int root, const Tensor& own);
std::string describe_header(const CollectiveHeader& header);
// Empty when every rank's header (`all`, size() of them, rank order) agrees;
// otherwise a message naming this rank's and the first differing rank's.
std::string header_mismatch(const CollectiveHeader* all, int ranks, int rank);
bool debug_checks();  // MT_DIST_DEBUG=1

// The tensor of `what` whose shape every rank must agree on.
inline const Tensor& own_tensor(Collective what, const Tensor& out, const Tensor& in) {
  return what == Collective::ReduceScatter ? out : in;
}

// Divides every tensor (f32, f16 or bf16) by `divisor` in place, all of them
// in one fused multi-tensor pass: the sums of a collective become means.
void divide_in_place(const std::vector<Tensor>& tensors, int divisor);

// The world size mpirun (or another MPI launcher) gave this process; 0 without one.
int launcher_world_size();

#if MT_WITH_MPI
std::shared_ptr<ProcessGroup> make_mpi_world();
void mpi_abort(int exit_code);
#endif
#if MT_WITH_NCCL
std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device);
#endif

}  // namespace mt::dist::detail
