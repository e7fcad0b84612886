// mt::save_checkpoint / load_checkpoint: a training state (model, AdamW,
// GradScaler, LR schedule, the generator) in one call, resumed bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "mixtape.h"

using namespace mt;
using Catch::Contains;

namespace {

struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(drop->forward(relu(fc1->forward(x)))); }
};

// The whole training state of one run, built the same way each time.
struct Run {
  Net model;
  optim::AdamW opt{model.parameters(), {.lr = 3e-3}};
  optim::WarmupCosineLr sched{opt, 2, 8};
  amp::GradScaler scaler{};
  CheckpointParts parts() { return {{"model", model}, {"optimizer", opt}, {"scaler", scaler}, {"scheduler", sched}}; }
  void steps(int n, int first) {
    for (int s = first; s < first + n; ++s) {
      Generator data(static_cast<uint64_t>(100 + s));
      const Tensor x = randn({8, 6}, kF32, kCPU, &data);
      const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}, {8});
      opt.zero_grad();
      scaler.scale(cross_entropy(model.forward(x), y)).backward();
      scaler.step(opt);
      scaler.update();
      sched.step();
    }
  }
};

std::string temp_path(const char* name) { return (std::filesystem::temp_directory_path() / name).string(); }

}  // namespace

// Catches: a part left out of the file (the optimizer's moments, the
// scaler's scale, the schedule's step), the model's names prefixed so
// PyTorch could not load them, and the generator not restored (the resumed
// run would draw other dropout masks): each makes the resumed run differ.
TEST_CASE("save_checkpoint and load_checkpoint resume a run bit for bit", "[core][checkpoint]") {
  default_generator().set_state({1234, 0});
  Run straight;
  straight.steps(6, 0);

  default_generator().set_state({1234, 0});
  const std::string path = temp_path("mt_checkpoint_file_test.safetensors");
  {
    Run first;
    first.steps(3, 0);
    save_checkpoint(path, first.parts());
  }
  default_generator().set_state({99, 99});  // what the resumed run must not use
  Run resumed;
  load_checkpoint(path, resumed.parts());
  CHECK(resumed.sched.last_step() == 3);
  resumed.steps(3, 3);
  const auto want = straight.model.state_dict(), got = resumed.model.state_dict();
  for (const auto& [name, t] : want) {
    INFO(name);
    CHECK(got.at(name).to_vector() == t.to_vector());
  }
  CHECK(resumed.scaler.get_scale() == straight.scaler.get_scale());

  // The layout: the model's own names, the rest under "<part>.".
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.tensors.count("fc1.weight") == 1);
  CHECK(f.tensors.count("scheduler.last_step") == 1);
  CHECK(f.tensors.count("scaler.scale") == 1);
  bool has_optimizer = false;
  for (const auto& [key, t] : f.tensors) has_optimizer = has_optimizer || key.starts_with("optimizer.");
  CHECK(has_optimizer);
  std::remove(path.c_str());
}

// Catches: a file missing a part, or holding tensors no part claims, loaded
// as if it were whole; a part name that would collide with the model's keys;
// a NaN weight loaded (and trained on).
TEST_CASE("load_checkpoint refuses a file that does not match the parts", "[core][checkpoint][errors]") {
  const std::string path = temp_path("mt_checkpoint_file_parts.safetensors");
  Run run;
  save_checkpoint(path, {{"model", run.model}, {"optimizer", run.opt}});
  CHECK_THROWS_WITH(load_checkpoint(path, run.parts()), Contains("holds nothing for part 'scaler'"));
  CHECK_THROWS_WITH(load_checkpoint(path, {{"model", run.model}}), Contains("part 'model' does not load"));
  CHECK_THROWS_WITH(load_checkpoint(path, {{"optimizer", run.opt}}), Contains("belong to none of the parts"));
  CHECK_THROWS_WITH(save_checkpoint(path, {{"a.b", run.model}}), Contains("without '.'"));
  // A poisoned weight is refused, named, and nothing is loaded.
  {
    const NoGradGuard no_grad;
    fill_(run.model.fc2->bias.narrow(0, 1, 1), NAN);
  }
  save_checkpoint(path, {{"model", run.model}, {"optimizer", run.opt}});
  Run other;
  const std::vector<double> before = other.model.fc1->weight.to_vector();
  CHECK_THROWS_WITH(load_checkpoint(path, {{"model", other.model}, {"optimizer", other.opt}}),
                    Contains("tensor 'fc2.bias' holds NaN or inf"));
  CHECK(other.model.fc1->weight.to_vector() == before);
  std::remove(path.c_str());
}
