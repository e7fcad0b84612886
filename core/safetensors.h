// safetensors: the checkpoint format (https://github.com/huggingface/safetensors).
//
//   u64 little-endian N | N bytes of JSON header | raw little-endian tensor data
//   header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "value"}}
//
// Loading validates everything the format promises (header size, JSON,
// dtypes, shapes, offsets contiguous from 0 with no holes or overlaps, file
// size) and reports the first violation as an mt::Error naming the file, so
// a truncated or corrupt checkpoint is a clear message, never a crash.
// Saving is atomic: a temporary file is written, fsync'ed and renamed over
// the target, so a crash mid-save never destroys the previous checkpoint.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace mt {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // CPU tensors
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

std::string safetensors_dtype_name(DType dtype);

}  // namespace mt
