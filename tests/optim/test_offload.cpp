// Offloaded optimizer state (PrecisionOptions::offload_state, `train
// --offload-optimizer`): bit-identical to the resident optimizer, with the
// state in host memory and none of it left on the device between steps.
#include <catch2/catch.hpp>
#include <optional>
#include <vector>

#include "core/memory_ledger.h"
#include "core/stream.h"
#include "runtime/sim/runtime.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"
#include "tools/train/trainer.h"

using namespace mt;

namespace {

struct Run {
  std::vector<double> params;
  optim::StateDict state;
  int64_t device_state_bytes = 0;  // optimizer state and masters on the device after the last step
};

// On sim, with `deferral`: the steps run on a stream of their own and the
// simulator holds every stream's work until something waits for it, so an
// update that does not wait for its copy in (or a copy out that does not wait
// for its update) reads stale state.
class DeferredSimStreams {
 public:
  DeferredSimStreams(Device device, std::optional<simulator::FlushOrder> order) {
    if (!order || !device.is_sim()) return;
    compute_.emplace(Stream::create(device));
    guard_.emplace(*compute_);
    simulator::begin_deferred_streams(*order);
  }
  ~DeferredSimStreams() {
    if (compute_) simulator::end_deferred_streams();
  }

 private:
  std::optional<Stream> compute_;
  std::optional<StreamGuard> guard_;
};

// Three parameters of different sizes (one left without a gradient on step 2),
// five steps, the third skipped as a GradScaler would skip it (found_inf).
Run run_steps(bool offload, bool sgd, DType dtype, bool master_weights, bool stochastic,
              std::optional<simulator::FlushOrder> deferral = std::nullopt,
              optim::StateDtype state_dtype = optim::StateDtype::F32) {
  const Device device = test::kCudaPath;
  const DeferredSimStreams deferred(device, deferral);
  std::vector<Tensor> params = {test::random_tensor({7, 5}, dtype, device, 1).requires_grad_(),
                                test::random_tensor({5}, dtype, device, 2).requires_grad_(),
                                test::random_tensor({3, 4}, dtype, device, 3).requires_grad_()};
  // 8-bit state for every tensor here, however small, in blocks of 64 (several per parameter).
  const optim::PrecisionOptions precision{.master_weights = master_weights,
                                          .stochastic_rounding = stochastic,
                                          .seed = 4,
                                          .offload_state = offload,
                                          .state_dtype = state_dtype,
                                          .state_block = 64,
                                          .min_quantized_numel = 0};
  std::unique_ptr<optim::Optimizer> opt;
  if (sgd) {
    opt = std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = 0.05, .momentum = 0.9}, precision);
  } else {
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1}, precision);
  }
  const Tensor found_inf = zeros({1}, kF32, device);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (step == 2 && i == 1) {
        params[i].set_grad(Tensor());
        continue;
      }
      params[i].set_grad(test::random_tensor(params[i].sizes(), dtype, device, 100 + 10 * step + i));
    }
    fill_(found_inf, step == 3 ? 1.0 : 0.0);
    opt->step({.inv_scale = Tensor(), .found_inf = found_inf, .lr_factor = Tensor()});
  }
  Run r;
  for (const Tensor& p : params) {
    for (double v : p.to(kCPU).to_vector()) r.params.push_back(v);
  }
  r.state = opt->state_dict();
  const MemoryLedger ledger = memory_ledger(device);
  r.device_state_bytes = ledger[MemoryCategory::OptimizerState] + ledger[MemoryCategory::MasterWeights];
  return r;
}

}  // namespace

// Catches: an offloaded update that skips copying the state back (every step
// restarts the moments), copies it back before the kernel ran, loses the
// stochastic-rounding offset of the per-parameter calls, drops the skipped
// step's found_inf, leaves device copies alive after the step, or stages
// 8-bit state without its absmax (or BF16 state in an f32 buffer).
TEST_CASE("offloaded optimizer state gives bit-identical results with the state in host memory", "[optim][offload]") {
  struct Mode {
    const char* name;
    bool sgd;
    DType dtype;
    bool master_weights, stochastic;
    optim::StateDtype state = optim::StateDtype::F32;
  };
  for (const Mode& m :
       {Mode{"adamw f32", false, kF32, false, false}, Mode{"adamw f16 masters", false, kF16, true, false},
        Mode{"adamw bf16 masters, stochastic rounding", false, kBF16, true, true},
        Mode{"sgd momentum f32", true, kF32, false, false},
        Mode{"adamw bf16 masters, 8-bit state", false, kBF16, true, false, optim::StateDtype::Int8},
        Mode{"sgd momentum f32, bf16 state", true, kF32, false, false, optim::StateDtype::BF16}}) {
    INFO(m.name);
    const Run resident = run_steps(false, m.sgd, m.dtype, m.master_weights, m.stochastic, std::nullopt, m.state);
    const Run offloaded = run_steps(true, m.sgd, m.dtype, m.master_weights, m.stochastic, std::nullopt, m.state);
    CHECK(offloaded.params == resident.params);
    REQUIRE(offloaded.state.size() == resident.state.size());
    for (const auto& [key, value] : resident.state) {
      INFO(key);
      const Tensor& moved = offloaded.state.at(key);
      const bool step_counter = key.find(".step") != std::string::npos;
      CHECK(moved.device() == (step_counter ? test::kCudaPath : kCPU));
      CHECK(moved.to(kCPU).to_vector() == value.to(kCPU).to_vector());
    }
    // Only the step counters (4 bytes per parameter) stay on the device.
    CHECK(offloaded.device_state_bytes < resident.device_state_bytes);
  }
}

// Catches: the copies of offloaded state racing the updates on the side
// stream (an update not waiting for its copy in, a copy out not waiting for
// its update, a staging slot refilled before its copy out). On sim the streams
// are held until waited for, in both flush orders; on a GPU they really overlap.
TEST_CASE("offloaded state copies on the side stream are ordered against the updates", "[optim][offload][stream]") {
  for (auto order : {simulator::FlushOrder::OldestStreamFirst, simulator::FlushOrder::NewestStreamFirst}) {
    INFO((order == simulator::FlushOrder::OldestStreamFirst ? "oldest stream first" : "newest stream first"));
    for (bool sgd : {false, true}) {
      INFO((sgd ? "sgd momentum" : "adamw f16 masters"));
      const DType dtype = sgd ? kF32 : kF16;
      const Run resident = run_steps(false, sgd, dtype, !sgd, false);
      const Run offloaded = run_steps(true, sgd, dtype, !sgd, false, order);
      CHECK(offloaded.params == resident.params);
      for (const auto& [key, value] : resident.state) {
        INFO(key);
        CHECK(offloaded.state.at(key).to(kCPU).to_vector() == value.to(kCPU).to_vector());
      }
    }
  }
}

// Catches: the trainer not passing --offload-optimizer on, or the offloaded
// step diverging under the GradScaler and the device-side LR schedule.
TEST_CASE("train --offload-optimizer on sim gives the losses of the resident optimizer", "[optim][offload][train]") {
  std::vector<std::vector<double>> losses;
  for (bool offload : {false, true}) {
    tools::TrainConfig c;
    c.model = "mlp";
    c.device = kSIM;
    c.precision.mode = tools::Precision::Fp16;
    c.precision.master_weights = true;
    c.optim.offload = offload;
    c.max_steps = 4;
    c.batch = 16;
    c.data.train_limit = 64;
    c.data.test_limit = 16;
    c.report.progress = false;
    std::FILE* sink = std::fopen("/dev/null", "w");
    const tools::TrainSummary summary = tools::train(c, sink);
    std::fclose(sink);
    losses.push_back(summary.losses);
  }
  CHECK(losses[1].size() == 4);
  CHECK(losses[1] == losses[0]);
}

// Catches: offloading silently accepted where it means nothing.
TEST_CASE("train --offload-optimizer is refused on the CPU", "[optim][offload][errors]") {
  tools::TrainConfig c;
  c.model = "mlp";
  c.device = kCPU;
  c.optim.offload = true;
  c.max_steps = 1;
  c.data.train_limit = 64;
  CHECK_THROWS_WITH(tools::train(c), Catch::Contains("on the CPU it is there already"));
}
