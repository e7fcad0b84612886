// The NCCL back end: collectives on CUDA tensors, queued on a communication
// stream of the tensors' GPU, so the host never waits for them.
//
// libnccl is opened at run time (dlopen), not linked: mixtape's binaries then
// start on machines without it (NCCL is only needed once a CUDA tensor is
// reduced across ranks), and the same build uses whichever libnccl.so.2 the
// machine has (MT_NCCL_LIBRARY names another). The unique id that ties the
// ranks' communicators together is made by rank 0 and broadcast over the
// bootstrap group (MPI, or the world of one).
//
// Ordering: each collective first makes the communication stream wait for
// the caller's current stream (an event), so it reads finished gradients;
// Work::wait() makes the caller's current stream wait for the collective.
// The tensors are kept alive until then, so the caching allocator cannot
// hand their memory to another stream while NCCL still reads it.
//
// Failures: the host never waits for a collective, so a CollectiveWatchdog
// (distributed/watchdog.h) watches each one. Past MT_DIST_TIMEOUT, or when
// ncclCommGetAsyncError reports an error, it aborts the communicator (which
// frees the GPU from the stuck kernel) and ends this process with exit code
// 3; mpirun then stops the other ranks.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/stream.h"
#include "distributed/backends.h"
#include "distributed/watchdog.h"

namespace mt::dist::detail {
namespace {

// The entry points mixtape uses, resolved from the library.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    const char* name = std::getenv("MT_NCCL_LIBRARY");
    if (name == nullptr || *name == '\0') name = "libnccl.so.2";
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    MT_CHECK(lib != nullptr,
             "dist: the NCCL back end needs {} ({}); install NCCL or point MT_NCCL_LIBRARY at libnccl.so.2", name,
             dlerror());
    NcclApi a;
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      MT_CHECK(fn != nullptr, "dist: {} has no {}", name, symbol);
    };
    load(a.get_unique_id, "ncclGetUniqueId");
    load(a.comm_init_rank, "ncclCommInitRank");
    load(a.comm_destroy, "ncclCommDestroy");
    load(a.comm_abort, "ncclCommAbort");
    load(a.comm_get_async_error, "ncclCommGetAsyncError");
    load(a.all_reduce, "ncclAllReduce");
    load(a.broadcast, "ncclBroadcast");
    load(a.all_gather, "ncclAllGather");
    load(a.reduce_scatter, "ncclReduceScatter");
    load(a.error_string, "ncclGetErrorString");
    load(a.get_version, "ncclGetVersion");
    return a;
  }();
  return api;
}

void check(ncclResult_t result, const char* what) {
  MT_CHECK(result == ncclSuccess, "dist: {} failed: {}", what, nccl().error_string(result));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F64: return ncclFloat64;
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I64: return ncclInt64;
    case DType::I32: return ncclInt32;
    case DType::I8: return ncclInt8;
    case DType::U8:
    case DType::Bool:
    case DType::F8E4M3:
    case DType::F8E5M2: return ncclUint8;  // moved as bytes; reductions refuse FP8 (process_group.cpp)
  }
  return ncclFloat32;
}

class NcclWork final : public Work {
 public:
  NcclWork(Device device, Tensor out, Tensor in)
      : device_(device), done_(std::make_shared<Event>(device)), out_(std::move(out)), in_(std::move(in)) {}
  Event& done() { return *done_; }
  void wait() override {
    current_stream(device_).wait(*done_);
    out_ = Tensor();
    in_ = Tensor();
  }
  bool is_completed() override { return done_->query(); }

 private:
  Device device_;
  std::shared_ptr<Event> done_;
  Tensor out_, in_;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ProcessGroup& bootstrap, Device device)
      : bootstrap_(bootstrap), device_(device), stream_(Stream::create(device)), ready_(device) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (bootstrap.rank() == 0) check(nccl().get_unique_id(&id), "ncclGetUniqueId");
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id))}, kU8);
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
    bootstrap.broadcast(bytes, 0)->wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof(id));
    MT_CHECK(cudaSetDevice(device.index) == cudaSuccess, "dist: cudaSetDevice({}) failed", device.index);
    check(nccl().comm_init_rank(&comm_, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank");
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        CollectiveWatchdog::Options{
            .timeout_seconds = collective_timeout_seconds(), .rank = bootstrap.rank(), .world = bootstrap.size()},
        [this](const std::string& message) { abort_and_exit(message); }, [this] { return async_error(); });
  }
  ~NcclGroup() override {
    stream_.synchronize();
    watchdog_.reset();
    nccl().comm_destroy(comm_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  std::string backend() const override { return "nccl"; }

 protected:
  std::shared_ptr<Work> run(Collective what, const Tensor& out, const Tensor& in, ReduceOp op, int root) override {
    MT_CHECK(out.device() == device_, "dist::{}: this NCCL group is on {}, the tensor on {}", collective_name(what),
             device_.str(), out.device().str());
    if (debug_checks()) check_headers(what, out, in, op, root);
    ready_.record(current_stream(device_));
    stream_.wait(ready_);  // the collective reads what the caller's stream has written
    auto work = std::make_shared<NcclWork>(device_, out, in);
    auto* s = static_cast<cudaStream_t>(stream_.handle());
    const ncclDataType_t type = nccl_type(in.dtype());
    const ncclRedOp_t reduce = op == ReduceOp::Max ? ncclMax : ncclSum;
    const auto n = [](const Tensor& t) { return static_cast<size_t>(t.numel()); };
    switch (what) {
      case Collective::AllReduce:
        check(nccl().all_reduce(in.data_ptr(), out.data_ptr(), n(out), type, reduce, comm_, s), "ncclAllReduce");
        break;
      case Collective::Broadcast:
        check(nccl().broadcast(in.data_ptr(), out.data_ptr(), n(out), type, root, comm_, s), "ncclBroadcast");
        break;
      case Collective::AllGather:
        check(nccl().all_gather(in.data_ptr(), out.data_ptr(), n(in), type, comm_, s), "ncclAllGather");
        break;
      case Collective::ReduceScatter:
        check(nccl().reduce_scatter(in.data_ptr(), out.data_ptr(), n(out), type, reduce, comm_, s),
              "ncclReduceScatter");
        break;
    }
    work->done().record(stream_);
    watchdog_->watch(work, fmt::format("{} of {} {} elements (NCCL, {})", collective_name(what), out.numel(),
                                       out.dtype(), device_.str()));
    return work;
  }

  void run_barrier() override {
    stream_.synchronize();
    bootstrap_.barrier();
  }

 private:
  // MT_DIST_DEBUG: the headers travel over the bootstrap group, on the host.
  void check_headers(Collective what, const Tensor& out, const Tensor& in, ReduceOp op, int root) {
    const CollectiveHeader mine = collective_header(what, op, root, own_tensor(what, out, in));
    Tensor local = from_vector(std::vector<int64_t>(mine.begin(), mine.end()), {static_cast<int64_t>(mine.size())});
    Tensor all = empty({static_cast<int64_t>(mine.size()) * size()}, kI64);
    bootstrap_.all_gather(all, local)->wait();
    const auto* values = all.data<int64_t>();
    std::vector<CollectiveHeader> headers(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) std::memcpy(headers[r].data(), values + r * mine.size(), sizeof(mine));
    const std::string error = header_mismatch(headers.data(), size(), rank());
    MT_CHECK(error.empty(), "{}", error);
  }

  // An error NCCL found on its own (a peer gone, a network failure), or empty.
  std::string async_error() const {
    ncclResult_t state = ncclSuccess;
    if (nccl().comm_get_async_error(comm_, &state) != ncclSuccess) return {};
    if (state == ncclSuccess || state == ncclInProgress) return {};
    return fmt::format("NCCL reported an error on its own: {}", nccl().error_string(state));
  }

  // From the watchdog's thread: the collective cannot be cancelled, and
  // the process's other threads may be blocked behind it.
  [[noreturn]] void abort_and_exit(const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    nccl().comm_abort(comm_);
    std::_Exit(3);
  }

  ProcessGroup& bootstrap_;
  Device device_;
  Stream stream_;
  Event ready_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device) {
  return std::make_shared<NcclGroup>(bootstrap, device);
}

}  // namespace mt::dist::detail
