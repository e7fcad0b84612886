// libFuzzer target: the parsers of text that users and environments hand
// mixtape: --device, --precision, --mem-budget sizes, MT_CUDA_ALLOC_CONF.
//
// Every parser gets the whole input.
//
// Catches: lenient parsing ("12abc" read as 12), numbers that overflow, an
// exception type other than mt::Error (std::stoll's out_of_range), and
// values accepted that the run cannot use (a negative or zero size).
#include <cstdint>
#include <string>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "tests/fuzz/fuzz_input.h"
#include "tools/train/bench.h"
#include "tools/train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  mt::fuzz::refuses_cleanly([&] { (void)mt::parse_device(text); });
  mt::fuzz::refuses_cleanly([&] { (void)mt::tools::parse_precision(text); });
  mt::fuzz::refuses_cleanly([&] {
    if (mt::tools::parse_bytes(text) <= 0) __builtin_trap();
  });
  mt::fuzz::refuses_cleanly([&] {
    if (mt::parse_alloc_conf(text).max_split_size == 0) __builtin_trap();
  });
  return 0;
}
