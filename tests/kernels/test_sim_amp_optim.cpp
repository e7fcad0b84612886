// The CUDA kernels of the AMP and optimizer families (multi-tensor
// unscale-and-check, the scale update, fused AdamW and SGD, the clip norm's
// sum of squares) run on the `sim` device against the CPU backend, alone and
// in a small GradScaler + AdamW training step. Shapes stay small: every
// simulated thread is a fiber.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/amp/amp.h"
#include "kernels/optim/optim.h"
#include "mixtape.h"
#include "tests/kernels/sim_tensor_util.h"

using namespace mt;

using test::check_matches;
using test::random_cpu;

namespace {

// The same list of gradients on both devices: two chunks of f32, f16, a
// strided bf16 view, and 60 tiny tensors (more than one launch's table).
struct GradList {
  std::vector<Tensor> cpu, sim;
};
GradList make_grad_list() {
  GradList list;
  auto add_pair = [&](const Tensor& t) {
    list.cpu.push_back(t.clone());
    list.sim.push_back(t.to(test::kCudaPath));
  };
  add_pair(random_cpu({70000}, kF32, 71));
  add_pair(random_cpu({33}, kF16, 72, -100, 100));
  add_pair(random_cpu({5, 4}, kBF16, 73));
  for (unsigned i = 0; i < 60; ++i) add_pair(random_cpu({3}, kF32, 100 + i));
  // A transposed (non-contiguous) view in the list.
  list.cpu[2] = list.cpu[2].t();
  list.sim[2] = list.sim[2].t();
  return list;
}

void check_lists(const std::vector<Tensor>& sim, const std::vector<Tensor>& cpu, double tol, const std::string& what) {
  for (size_t i = 0; i < cpu.size(); ++i) check_matches(sim[i], cpu[i], tol, what + " tensor " + std::to_string(i));
}

}  // namespace

TEST_CASE("multi-tensor unscale_and_check_inf and update_scale match the CPU on sim", "[sim][amp]") {
  GradList grads = make_grad_list();
  const Tensor found_cpu = zeros({1}), found_sim = zeros({1}, kF32, test::kCudaPath);
  const Tensor inv_cpu = full({1}, 0.25), inv_sim = full({1}, 0.25, kF32, test::kCudaPath);
  kernels::unscale_and_check_inf(grads.cpu, found_cpu, inv_cpu);
  kernels::unscale_and_check_inf(grads.sim, found_sim, inv_sim);
  check_lists(grads.sim, grads.cpu, 0, "unscaled");
  check_matches(found_sim, found_cpu, 0, "found_inf (clean)");
  CHECK(found_sim.item<float>() == 0.0f);
  // One inf in the last tiny tensor and a NaN in the big one's second chunk.
  write_element(grads.cpu[62], 1, INFINITY);
  write_element(grads.sim[62], 1, INFINITY);
  write_element(grads.cpu[0], 65536 + 7, NAN);
  write_element(grads.sim[0], 65536 + 7, NAN);
  kernels::unscale_and_check_inf(grads.cpu, found_cpu, Tensor());  // check only
  kernels::unscale_and_check_inf(grads.sim, found_sim, Tensor());
  CHECK(found_sim.item<float>() == 1.0f);
  check_lists(grads.sim, grads.cpu, 0, "check-only leaves values");

  // --explain-skips: the same pass flags which tensors held them. 63 tensors
  // take two launches, so tensor 62 sits in slot 14 of the second: a kernel
  // writing its slot instead of its position in the list flags tensor 14.
  const Tensor per_cpu = zeros({63}), per_sim = zeros({63}, kF32, test::kCudaPath);
  kernels::unscale_and_check_inf(grads.cpu, zeros({1}), Tensor(), per_cpu);
  kernels::unscale_and_check_inf(grads.sim, zeros({1}, kF32, test::kCudaPath), Tensor(), per_sim);
  std::vector<double> flagged(63, 0.0);
  flagged[0] = flagged[62] = 1.0;
  CHECK(per_cpu.to_vector() == flagged);
  CHECK(per_sim.to(kCPU).to_vector() == flagged);

  // The scale update, step by step against the CPU (growth every 2 clean steps).
  const Tensor scale_cpu = full({1}, 65536.0), scale_sim = full({1}, 65536.0, kF32, test::kCudaPath);
  const Tensor tracker_cpu = zeros({1}, kI32), tracker_sim = zeros({1}, kI32, test::kCudaPath);
  const kernels::ScaleUpdateArgs args{
      .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2, .min_scale = 1.0, .max_scale = 1 << 20};
  for (float inf : {0.f, 0.f, 1.f, 0.f, 1.f, 1.f, 0.f, 0.f, 0.f}) {
    fill_(found_cpu, inf);
    fill_(found_sim, inf);
    kernels::update_scale(scale_cpu, tracker_cpu, found_cpu, args);
    kernels::update_scale(scale_sim, tracker_sim, found_sim, args);
    check_matches(scale_sim, scale_cpu, 0, "scale");
    check_matches(tracker_sim, tracker_cpu, 0, "growth tracker");
  }
}

namespace {

struct SlotSet {
  std::vector<kernels::ParamSlot> cpu, sim;
};

// f32 parameter without master; bf16 and f16 parameters with f32 masters; optional state.
SlotSet make_slots(bool with_state2, bool with_state1 = true) {
  SlotSet set;
  auto add = [&](const Shape& shape, DType param_dtype, bool master, unsigned seed) {
    const Tensor w = random_cpu(shape, kF32, seed);
    const Tensor g = random_cpu(shape, param_dtype, seed + 1);
    for (int d = 0; d < 2; ++d) {
      const Device dev = d == 0 ? kCPU : test::kCudaPath;
      kernels::ParamSlot s;
      s.param = w.to(param_dtype).to(dev);
      s.grad = g.to(dev);
      if (master) s.master = w.to(dev);
      if (with_state1) s.state1 = zeros(shape, kF32, dev);
      if (with_state2) s.state2 = zeros(shape, kF32, dev);
      s.step = zeros({1}, kF32, dev);
      (d == 0 ? set.cpu : set.sim).push_back(s);
    }
  };
  add({70000}, kF32, false, 81);
  add({7, 3}, kBF16, true, 83);
  add({9}, kF16, true, 85);
  return set;
}

void check_slots(const SlotSet& set, const std::string& what) {
  for (size_t i = 0; i < set.cpu.size(); ++i) {
    const auto& c = set.cpu[i];
    const auto& s = set.sim[i];
    const std::string name = what + " slot " + std::to_string(i);
    check_matches(s.param, c.param, 1e-6, name + " param");
    if (c.master.defined()) check_matches(s.master, c.master, 1e-6, name + " master");
    if (c.state1.defined()) check_matches(s.state1, c.state1, 1e-6, name + " state1");
    if (c.state2.defined()) check_matches(s.state2, c.state2, 1e-6, name + " state2");
    check_matches(s.step, c.step, 0, name + " step");
  }
}

}  // namespace

TEST_CASE("fused AdamW matches the CPU on sim, and skips on found_inf without a host read", "[sim][optim]") {
  SlotSet set = make_slots(true);
  const kernels::AdamWArgs args{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  const kernels::AmpControl amp_cpu{full({1}, 0.5), zeros({1}), Tensor()};
  const kernels::AmpControl amp_sim{full({1}, 0.5, kF32, test::kCudaPath), zeros({1}, kF32, test::kCudaPath), Tensor()};
  const kernels::StochasticRounding rounding{.enabled = true};
  for (int step = 0; step < 2; ++step) {
    kernels::adamw_step(set.cpu, args, amp_cpu, rounding);
    kernels::adamw_step(set.sim, args, amp_sim, rounding);
    check_slots(set, "adamw step " + std::to_string(step));
  }
  CHECK(set.sim[0].step.item<float>() == 2.0f);
  // found_inf = 1: nothing changes, not even the step counters.
  fill_(amp_cpu.found_inf, 1.0);
  fill_(amp_sim.found_inf, 1.0);
  const std::vector<double> before = set.sim[1].param.to_vector();
  kernels::adamw_step(set.cpu, args, amp_cpu, rounding);
  kernels::adamw_step(set.sim, args, amp_sim, rounding);
  CHECK(set.sim[1].param.to_vector() == before);
  CHECK(set.sim[0].step.item<float>() == 2.0f);
  check_slots(set, "adamw skipped");
}

TEST_CASE("fused SGD matches the CPU on sim", "[sim][optim]") {
  for (bool momentum : {false, true}) {
    SlotSet set = make_slots(false, momentum);
    kernels::SgdArgs args{
        .lr = 0.1, .momentum = momentum ? 0.9 : 0.0, .dampening = 0.1, .weight_decay = 0.01, .nesterov = momentum};
    if (momentum) args.dampening = 0;  // nesterov needs zero dampening
    for (int step = 0; step < 2; ++step) {
      kernels::sgd_step(set.cpu, args, {}, {});
      kernels::sgd_step(set.sim, args, {}, {});
      check_slots(set, std::string(momentum ? "nesterov" : "plain") + " sgd step " + std::to_string(step));
    }
  }
}

TEST_CASE("sum_of_squares and clip scaling match the CPU on sim", "[sim][optim]") {
  GradList grads = make_grad_list();
  const Tensor total_cpu = zeros({1}), total_sim = zeros({1}, kF32, test::kCudaPath);
  kernels::sum_of_squares(grads.cpu, total_cpu);
  kernels::sum_of_squares(grads.sim, total_sim);
  check_matches(total_sim, total_cpu, 1e-5, "sum of squares");
  const Tensor norm_cpu = sqrt(total_cpu), norm_sim = sqrt(total_sim);
  kernels::scale_by_clip_coefficient(grads.cpu, norm_cpu, 1.0);
  kernels::scale_by_clip_coefficient(grads.sim, norm_sim, 1.0);
  check_lists(grads.sim, grads.cpu, 2e-5, "clipped");
  // The clipped list has norm 1 (up to the 1e-6 in the coefficient).
  kernels::sum_of_squares(grads.sim, total_sim);
  CHECK(total_sim.item<float>() == Approx(1.0).epsilon(1e-3));
}

TEST_CASE("a small training step with GradScaler and AdamW runs on sim like on the CPU", "[sim][optim][amp]") {
  const Tensor x = random_cpu({16}, kF32, 91), target = random_cpu({16}, kF32, 92);
  Tensor params[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? kCPU : test::kCudaPath;
    Tensor w = random_cpu({16}, kF32, 93).to(dev).requires_grad_();
    optim::AdamW opt({w}, {.lr = 0.05});
    amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      const Tensor loss = mean(square(sub(mul(x.to(dev), w), target.to(dev))));
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
    params[d] = w;
    if (d == 1) CHECK(scaler.scale_tensor().device() == test::kCudaPath);
  }
  check_matches(params[1].detach(), params[0].detach(), 1e-5, "parameters after 3 steps");
}
