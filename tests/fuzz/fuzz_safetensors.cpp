// libFuzzer target: the safetensors reader (core/safetensors.cpp), which
// every checkpoint of `--resume` and `mixtape eval` passes through.
//
// Catches: a header length, offset, shape or dtype that makes the reader
// read or allocate past the file; JSON of the wrong type reaching nlohmann's
// exceptions; a header whose entry count makes validation quadratic (the
// per-input timeout); a loaded tensor whose bytes are not all in the file
// (every element is read below, so ASan sees it).
#include <cstdint>

#include "core/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::write_input("input.safetensors", data, size);
  return mt::fuzz::refuses_cleanly([&] {
    const mt::SafetensorsFile file = mt::load_safetensors(path);
    unsigned checksum = 0;
    for (const auto& [name, tensor] : file.tensors) {
      const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
      for (size_t i = 0; i < tensor.nbytes(); ++i) checksum += bytes[i];
    }
    for (const auto& [key, value] : file.metadata) checksum += static_cast<unsigned>(key.size() + value.size());
    volatile unsigned sink = checksum;
    (void)sink;
  });
}
