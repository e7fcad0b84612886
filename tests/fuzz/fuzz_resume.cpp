// libFuzzer target: resuming a training run from a checkpoint
// (tools::load_checkpoint, what `mixtape train --resume` does) and reading
// the run configuration a checkpoint records (tools::checkpoint_config, what
// `mixtape eval` does): metadata, model state, optimizer state and scaler
// state, all from a file someone else wrote.
//
// Catches: metadata read leniently or out of range (a negative batch index
// reached the data loader and crashed it), tensors of another dtype or shape
// loaded silently, NaN/inf weights or negative second moments trained on,
// a loss scale of 0/NaN/inf or negative accepted, optimizer keys that are
// unknown or missing, config JSON of the wrong types, hostile FP8 state
// (a zero or NaN scale, a history of another length: the seeds carry one).
#include <cstdint>

#include "core/safetensors.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::write_input("checkpoint.safetensors", data, size);
  mt::fuzz::refuses_cleanly([&] { (void)mt::tools::checkpoint_config(mt::load_safetensors(path), path); });
  return mt::fuzz::refuses_cleanly([&] {
    mt::fuzz::TinyRun run;
    const mt::tools::CheckpointPosition pos = run.resume(path);
    // What was accepted is what train() may use: in range and finite.
    const bool in_range = pos.epoch >= 0 && pos.epoch <= run.config.epochs && pos.sample_in_epoch >= 0 &&
                          pos.sample_in_epoch <= mt::fuzz::TinyRun::kSamplesPerEpoch && pos.step >= 0;
    const double scale = run.scaler.get_scale();
    if (!in_range || !(scale > 0 && scale < 1e300) || !(run.schedule.current_lr() >= 0)) __builtin_trap();
  });
}
