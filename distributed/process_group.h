// mt::dist::ProcessGroup: the collectives data parallel training is built on.
//
// One process per device; every process calls the same collectives in the
// same order. The back end follows the tensors' device:
//   * MPI (OpenMPI) for tensors in host memory (CPU and sim). It is also the
//     launcher and the bootstrap: `mpirun -np N mixtape train ...` starts the
//     processes, and rank and world size come from MPI_COMM_WORLD;
//   * NCCL for CUDA tensors, its unique id broadcast over MPI, its
//     collectives queued on mixtape's current stream (the host never waits).
// MT_DIST_BACKEND=mpi|nccl overrides the choice. A process started without
// mpirun is a world of one ("local"): every collective leaves its tensor as
// it is, and no MPI is needed, so single-process training pays nothing.
//
// Collectives are asynchronous: each returns a Work, and the tensors must
// stay alive and untouched until its wait() returns. MPI runs them in order
// on one communication thread, so they overlap with the caller's compute.
//
// Failures never hang: a collective that has not completed after
// MT_DIST_TIMEOUT seconds (default 300) ends the whole job with a message
// naming the collective and this rank; a rank that dies is noticed by
// mpirun, which stops the others. With MT_DIST_DEBUG=1 every collective
// first exchanges a small header (operation, dtype, shape) and a mismatch
// between ranks is an mt::Error naming both ranks' shapes.
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"

namespace mt::dist {

enum class ReduceOp { Sum, Max };

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Host memory: blocks until the collective has finished, and rethrows its
  // error. CUDA: makes the current stream wait for it (the host does not).
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

// What a back end runs (ProcessGroup::run).
enum class Collective { AllReduce, Broadcast, AllGather, ReduceScatter };
const char* collective_name(Collective what);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi" or "nccl"

  // In place on `t` (contiguous): every rank ends with the elementwise sum or max.
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // `t` on every rank becomes root's.
  std::shared_ptr<Work> broadcast(const Tensor& t, int root = 0);
  // `out` holds size() x in.numel() elements: rank r's `in` at r x in.numel().
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in);
  // `in` holds size() x out.numel() elements; rank r's `out` becomes the
  // reduction over ranks of slice r.
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum);
  void barrier();

 protected:
  // Arguments already checked; all_reduce and broadcast pass `out` = `in`.
  virtual std::shared_ptr<Work> run(Collective what, const Tensor& out, const Tensor& in, ReduceOp op, int root) = 0;
  virtual void run_barrier() = 0;
};

// Starts (once) the process group of this process: MPI when launched by
// mpirun and the build has MPI, otherwise the local world of one.
// MT_DIST_BACKEND=local forces the world of one.
std::shared_ptr<ProcessGroup> init_process_group();
// The group init_process_group() started (a world of one before it is called).
ProcessGroup& world();
bool is_distributed();  // world().size() > 1
// This process's rank among those on its machine (to pick its GPU).
int local_rank();
// Ends the job on every rank at once, after an error on this one (MPI_Abort:
// the others would otherwise wait in their next collective). Returns only
// in a world of one.
void abort_job(int exit_code);
// Shuts the group down (MPI_Finalize); at exit, if not called before.
void finalize();

// The group for tensors on `device`: world() for host memory (CPU, sim);
// for a CUDA device the NCCL group over the same ranks (bootstrapped over
// world(), made once), or world() itself in a world of one.
ProcessGroup& group_for(Device device);

// The validated value of MT_DIST_TIMEOUT (seconds).
double collective_timeout_seconds();
// Parses MT_DIST_BACKEND, MT_DIST_TIMEOUT and MT_DIST_DEBUG now (once; an
// mt::Error naming the variable for a bad value). init_process_group() does
// so before anything else; a program may call it earlier, at its start-up.
void check_settings();

}  // namespace mt::dist
