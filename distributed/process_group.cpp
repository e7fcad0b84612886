#include "distributed/process_group.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "distributed/backends.h"
#include "kernels/amp/amp.h"
#include "kernels/elementwise/elementwise.h"

namespace mt::dist {

const char* collective_name(Collective what) {
  switch (what) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
  }
  return "collective";
}

namespace {

void check_tensor(const char* op, const char* role, const Tensor& t) {
  MT_CHECK(t.defined(), "dist::{}: the {} tensor is undefined", op, role);
  MT_CHECK(t.is_contiguous(), "dist::{}: the {} tensor (shape {}) must be contiguous", op, role, t.shape_string());
}

void check_pair(const char* op, const Tensor& out, const Tensor& in, int64_t out_per_in_numerator,
                int64_t out_per_in_denominator, int ranks) {
  check_tensor(op, "output", out);
  check_tensor(op, "input", in);
  MT_CHECK(out.dtype() == in.dtype() && out.device() == in.device(),
           "dist::{}: output ({}, {}) and input ({}, {}) must have the same dtype and device", op, out.dtype(),
           out.device().str(), in.dtype(), in.device().str());
  MT_CHECK(out.numel() * out_per_in_denominator == in.numel() * out_per_in_numerator,
           "dist::{}: with {} ranks the output (shape {}) must hold {} the input's elements (shape {})", op, ranks,
           out.shape_string(), out_per_in_numerator > 1 ? fmt::format("{} x", ranks) : fmt::format("1/{} of", ranks),
           in.shape_string());
}

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// A world of one: the result of every collective is the tensor itself.
class LocalGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }

 protected:
  std::shared_ptr<Work> run(Collective what, const Tensor& out, const Tensor& in, ReduceOp, int) override {
    if (what == Collective::AllGather || what == Collective::ReduceScatter) kernels::copy(in.view(out.sizes()), out);
    return std::make_shared<DoneWork>();
  }
  void run_barrier() override {}
};

std::mutex world_mutex;
std::shared_ptr<ProcessGroup> world_group;
std::map<int, std::shared_ptr<ProcessGroup>> cuda_groups;  // by GPU index

int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return -1;
  int n = -1;
  const char* end = text + std::strlen(text);
  const auto [at, ec] = std::from_chars(text, end, n);
  return ec == std::errc() && at == end ? n : -1;
}

// The MT_DIST_* settings, parsed together, once. init_process_group() parses
// them on the thread that starts the group: the first read must not happen on
// MPI's communication thread, where a bad value's exception would terminate
// the process instead of reaching the caller as an error.
struct Settings {
  std::string backend;             // MT_DIST_BACKEND: "" (by the launcher), local, mpi or nccl
  double timeout_seconds = 300.0;  // MT_DIST_TIMEOUT
  bool debug = false;              // MT_DIST_DEBUG: compare every collective's shapes across ranks
};

std::string parse_backend() {
  const char* text = std::getenv("MT_DIST_BACKEND");
  const std::string b = text == nullptr ? "" : text;
  MT_CHECK(b.empty() || b == "local" || b == "mpi" || b == "nccl",
           "MT_DIST_BACKEND must be local, mpi or nccl, got '{}'", b);
  return b;
}

double parse_timeout() {
  const char* text = std::getenv("MT_DIST_TIMEOUT");
  if (text == nullptr || *text == '\0') return 300.0;
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  MT_CHECK(end != text && *end == '\0' && std::isfinite(s) && s > 0,
           "MT_DIST_TIMEOUT must be a positive number of seconds, got '{}'", text);
  return s;
}

bool parse_debug() {
  const char* text = std::getenv("MT_DIST_DEBUG");
  return text != nullptr && std::strcmp(text, "") != 0 && std::strcmp(text, "0") != 0;
}

const Settings& settings() {
  // A throw leaves it unset: the next call parses (and throws) again.
  static const Settings parsed{parse_backend(), parse_timeout(), parse_debug()};
  return parsed;
}

const std::string& backend_override() { return settings().backend; }

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", "", t);
  // Summing scaled bytes means nothing; FP8 training reduces its amax in f32.
  MT_CHECK(!is_fp8(t.dtype()), "dist::all_reduce: {} tensors cannot be reduced; reduce them in f32 (or bf16)",
           t.dtype());
  return run(Collective::AllReduce, t, t, op, 0);
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", "", t);
  MT_CHECK(root >= 0 && root < size(), "dist::broadcast: root {} is not a rank of this world of {}", root, size());
  return run(Collective::Broadcast, t, t, ReduceOp::Sum, root);
}

std::shared_ptr<Work> ProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  check_pair("all_gather", out, in, size(), 1, size());
  return run(Collective::AllGather, out, in, ReduceOp::Sum, 0);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_pair("reduce_scatter", out, in, 1, size(), size());
  MT_CHECK(!is_fp8(in.dtype()), "dist::reduce_scatter: {} tensors cannot be reduced; reduce them in f32 (or bf16)",
           in.dtype());
  return run(Collective::ReduceScatter, out, in, op, 0);
}

void ProcessGroup::barrier() { run_barrier(); }

namespace detail {

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const int n = env_int(name); n > 0) return n;
  }
  return 0;
}

CollectiveHeader collective_header(Collective what, ReduceOp op, int root, const Tensor& own) {
  CollectiveHeader h{};
  h[0] = static_cast<int64_t>(what);
  h[1] = static_cast<int64_t>(op);
  h[2] = root;
  h[3] = static_cast<int64_t>(own.dtype());
  const int64_t dims = own.dim();
  const bool fits = dims <= static_cast<int64_t>(h.size()) - 5;
  h[4] = fits ? dims : 1;  // a tensor of more dimensions is compared by its element count
  for (int64_t d = 0; d < h[4]; ++d) h[5 + d] = fits ? own.size(d) : own.numel();
  return h;
}

std::string describe_header(const CollectiveHeader& h) {
  std::vector<int64_t> shape(h.begin() + 5, h.begin() + 5 + h[4]);
  const auto what = static_cast<Collective>(h[0]);
  std::string text =
      fmt::format("{} of {} [{}]", collective_name(what), dtype_name(static_cast<DType>(h[3])), fmt::join(shape, ", "));
  if (what == Collective::AllReduce || what == Collective::ReduceScatter)
    text += static_cast<ReduceOp>(h[1]) == ReduceOp::Max ? " (max)" : " (sum)";
  if (what == Collective::Broadcast) text += fmt::format(" from rank {}", h[2]);
  return text;
}

std::string header_mismatch(const CollectiveHeader* all, int ranks, int rank) {
  for (int r = 0; r < ranks; ++r) {
    if (all[r] == all[rank]) continue;
    return fmt::format("dist: ranks disagree on a collective (MT_DIST_DEBUG): rank {} calls {}, rank {} calls {}", rank,
                       describe_header(all[rank]), r, describe_header(all[r]));
  }
  return {};
}

// The GradScaler's unscale kernel multiplies by a device scalar (here
// 1 / divisor) in one launch for the list; its inf flag goes to a scratch
// tensor, since the scaler checks the gradients itself.
void divide_in_place(const std::vector<Tensor>& tensors, int divisor) {
  if (divisor == 1 || tensors.empty()) return;
  const Device device = tensors.front().device();
  const Tensor inverse = full({1}, 1.0 / static_cast<double>(divisor), kF32, device);
  kernels::unscale_and_check_inf(tensors, zeros({1}, kF32, device), inverse);
}

bool debug_checks() { return settings().debug; }

}  // namespace detail

double collective_timeout_seconds() { return settings().timeout_seconds; }

void check_settings() { settings(); }

std::shared_ptr<ProcessGroup> init_process_group() {
  check_settings();  // here, on the caller's thread, before any back end starts one of its own
  const std::lock_guard lock(world_mutex);
  if (world_group) return world_group;
  const std::string forced = backend_override();
  const int launched = detail::launcher_world_size();
  if (forced == "local" || (launched == 0 && forced != "mpi")) {
    world_group = std::make_shared<LocalGroup>();
    return world_group;
  }
#if MT_WITH_MPI
  world_group = detail::make_mpi_world();
#else
  MT_CHECK(launched <= 1,
           "dist: this process was started as one of {} ranks, but this mixtape was built without MPI (install "
           "libopenmpi-dev and configure again)",
           launched);
  world_group = std::make_shared<LocalGroup>();
#endif
  return world_group;
}

ProcessGroup& world() {
  {
    const std::lock_guard lock(world_mutex);
    if (world_group) return *world_group;
  }
  static LocalGroup alone;
  return alone;
}

bool is_distributed() { return world().size() > 1; }

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"}) {
    if (const int n = env_int(name); n >= 0) return n;
  }
  return 0;
}

ProcessGroup& group_for(Device device) {
  ProcessGroup& host = world();
  // NCCL carries CUDA tensors between ranks; in a world of one there is
  // nothing to carry, unless MT_DIST_BACKEND=nccl asks for NCCL anyway (to
  // test it on a machine with one GPU).
  if (device.host_accessible() || (host.size() == 1 && backend_override() != "nccl")) return host;
  const std::lock_guard lock(world_mutex);
  std::shared_ptr<ProcessGroup>& group = cuda_groups[device.index];
  if (!group) {
#if MT_WITH_NCCL
    group = detail::make_nccl_group(host, device);
#else
    MT_CHECK(false, "dist: CUDA tensors need the NCCL back end, and this mixtape was built without NCCL");
#endif
  }
  return *group;
}

void abort_job(int exit_code) {
#if MT_WITH_MPI
  if (is_distributed() && world().backend() == "mpi") detail::mpi_abort(exit_code);
#endif
}

void finalize() {
  const std::lock_guard lock(world_mutex);
  cuda_groups.clear();
  world_group.reset();  // the MPI group's destructor ends MPI
}

}  // namespace mt::dist
