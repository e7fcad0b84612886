// The MPI back end: collectives on tensors in host memory (CPU and sim),
// and the bootstrap of every distributed run.
//
// MPI is initialised with MPI_THREAD_SERIALIZED and, after that, called only
// from this group's communication thread: collectives queue there in the
// order the caller issues them (the same order on every rank, which MPI
// requires) and run while the caller goes on computing. Each one is issued
// non-blocking and polled, so a rank that stops answering ends the job after
// MT_DIST_TIMEOUT seconds instead of hanging it.
//
// f16 and bf16 have no MPI type: they travel as 2-byte types of their own,
// reduced by user operations that widen each pair to f32, combine, and round
// back (as NCCL reduces halves).
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/backends.h"
#include "distributed/watchdog.h"
#include "runtime/half.h"

namespace mt::dist::detail {
namespace {

MPI_Datatype f16_type = MPI_DATATYPE_NULL, bf16_type = MPI_DATATYPE_NULL;
MPI_Op half_sum = MPI_OP_NULL, half_max = MPI_OP_NULL;

template <float (*ToFloat)(uint16_t), uint16_t (*ToBits)(float), bool Max>
void combine_halves(const void* in, void* inout, int n) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < n; ++i) {
    const float x = ToFloat(a[i]), y = ToFloat(b[i]);
    // NaN wins a max, as torch.maximum has it (and as inf-checks need).
    b[i] = ToBits(Max ? (x != x || x > y ? x : y) : x + y);
  }
}

template <bool Max>
void half_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  if (*type == f16_type) {
    combine_halves<f16_bits_to_f32, f32_to_f16_bits, Max>(in, inout, *len);
  } else {
    combine_halves<bf16_bits_to_f32, f32_to_bf16_bits, Max>(in, inout, *len);
  }
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F64: return MPI_DOUBLE;
    case DType::F32: return MPI_FLOAT;
    case DType::F16: return f16_type;
    case DType::BF16: return bf16_type;
    case DType::I64: return MPI_INT64_T;
    case DType::I32: return MPI_INT32_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::I8: return MPI_INT8_T;
    case DType::Bool:
    case DType::F8E4M3:
    case DType::F8E5M2: return MPI_UINT8_T;  // moved as bytes; reductions refuse FP8 (process_group.cpp)
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const bool half = dtype == DType::F16 || dtype == DType::BF16;
  if (op == ReduceOp::Max) return half ? half_max : MPI_MAX;
  return half ? half_sum : MPI_SUM;
}

// A collective queued on the communication thread.
class MpiWork final : public Work {
 public:
  MpiWork(Tensor out, Tensor in) : out_(std::move(out)), in_(std::move(in)) {}
  void wait() override {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw Error(error_);
  }
  bool is_completed() override {
    const std::lock_guard lock(mutex_);
    return done_;
  }
  void finish(std::string error = {}) {
    {
      const std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
      out_ = Tensor();  // the tensors were kept alive only while MPI used them
      in_ = Tensor();
    }
    done_cv_.notify_all();
  }

 private:
  Tensor out_, in_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
};

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MT_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "dist: this MPI offers thread level {}, and mixtape needs MPI_THREAD_SERIALIZED ({})", provided,
             static_cast<int>(MPI_THREAD_SERIALIZED));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Type_contiguous(2, MPI_BYTE, &f16_type);
    MPI_Type_commit(&f16_type);
    MPI_Type_contiguous(2, MPI_BYTE, &bf16_type);
    MPI_Type_commit(&bf16_type);
    MPI_Op_create(half_op<false>, /*commute=*/1, &half_sum);
    MPI_Op_create(half_op<true>, /*commute=*/1, &half_max);
    thread_ = std::thread([this] { communicate(); });
  }

  ~MpiGroup() override {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    queued_cv_.notify_all();
    thread_.join();
    MPI_Op_free(&half_sum);
    MPI_Op_free(&half_max);
    MPI_Type_free(&f16_type);
    MPI_Type_free(&bf16_type);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

 protected:
  std::shared_ptr<Work> run(Collective what, const Tensor& out, const Tensor& in, ReduceOp op, int root) override {
    MT_CHECK(out.device().host_accessible(),
             "dist::{}: the MPI back end takes tensors in host memory (cpu, sim), not {}; CUDA tensors go through "
             "NCCL (dist::group_for)",
             collective_name(what), out.device().str());
    auto work = std::make_shared<MpiWork>(out, in);
    enqueue([=, this, out = out, in = in]() mutable {
      if (debug_checks()) {
        const CollectiveHeader mine = collective_header(what, op, root, own_tensor(what, out, in));
        std::vector<CollectiveHeader> all(static_cast<size_t>(size_));
        MPI_Request request;
        MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                       static_cast<int>(mine.size()), MPI_INT64_T, MPI_COMM_WORLD, &request);
        complete(request, "the MT_DIST_DEBUG header exchange");
        if (std::string error = header_mismatch(all.data(), size_, rank_); !error.empty()) {
          work->finish(std::move(error));
          return;
        }
      }
      complete(issue(what, out, in, op, root), collective_name(what));
      // This thread's references go before the waiter wakes: it may free the
      // tensors and make new ones at once (FSDP's gradient buffers).
      out = Tensor();
      in = Tensor();
      work->finish();
    });
    return work;
  }

  void run_barrier() override {
    auto work = std::make_shared<MpiWork>(Tensor(), Tensor());
    enqueue([=, this] {
      MPI_Request request;
      MPI_Ibarrier(MPI_COMM_WORLD, &request);
      complete(request, "barrier");
      work->finish();
    });
    work->wait();
  }

 private:
  MPI_Request issue(Collective what, const Tensor& out, const Tensor& in, ReduceOp op, int root) const {
    const MPI_Datatype type = mpi_type(in.dtype());
    MPI_Request request;
    const auto n = [](const Tensor& t) {
      MT_CHECK(t.numel() <= INT32_MAX, "dist: MPI counts are 32-bit; split tensors of more than 2^31 elements");
      return static_cast<int>(t.numel());
    };
    switch (what) {
      case Collective::AllReduce:
        MPI_Iallreduce(MPI_IN_PLACE, out.data_ptr(), n(out), type, mpi_op(op, in.dtype()), MPI_COMM_WORLD, &request);
        break;
      case Collective::Broadcast: MPI_Ibcast(out.data_ptr(), n(out), type, root, MPI_COMM_WORLD, &request); break;
      case Collective::AllGather:
        MPI_Iallgather(in.data_ptr(), n(in), type, out.data_ptr(), n(in), type, MPI_COMM_WORLD, &request);
        break;
      case Collective::ReduceScatter:
        MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), n(out), type, mpi_op(op, in.dtype()), MPI_COMM_WORLD,
                                  &request);
        break;
    }
    return request;
  }

  // Polls until `request` completes; past the timeout the job ends here (a
  // collective cannot be cancelled, and the other ranks are stuck in it too).
  void complete(MPI_Request request, const char* what) const {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(collective_timeout_seconds());
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      // A non-blocking collective advances only inside MPI_Test, one round
      // of its algorithm at a time, so a sleep between polls would add to
      // every round. Yielding instead gives the core to the compute threads
      // whenever they can run, and polls again as soon as they cannot. Only
      // a collective that has waited a whole second (a rank far behind)
      // backs off to sleeping.
      if (Clock::now() - start < std::chrono::seconds(1)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if ((polls & 63) == 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "%s\n",
                     collective_timeout_message(rank_, size_, what, collective_timeout_seconds()).c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }

  void enqueue(std::function<void()> task) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    queued_cv_.notify_one();
  }

  void communicate() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        queued_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything queued has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  int rank_ = 0, size_ = 1;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable queued_cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_world() { return std::make_shared<MpiGroup>(); }

void mpi_abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace mt::dist::detail
