// `mixtape quantize`: post-training static quantization of a trained
// checkpoint into an INT8 one (W8A8 Linear layers, amp/int8_quantize.h),
// calibrated on the first N samples of the training split, and the float
// and INT8 models scored side by side on the held-out split.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amp/int8_quantize.h"
#include "tools/train/evaluate.h"

namespace mt::tools {

struct QuantizeRequest {
  std::string checkpoint, out, data_dir, device = "cpu";
  std::string observer = "mse";
  int64_t calibrate = 0;  // samples; 0: 512 for text, 1024 for images
  bool per_tensor = false;
  bool fold_batch_norm = true;        // each BatchNorm2d into the Conv2d before it (amp::int8::fold_batch_norms)
  bool requantize = true;             // u8 handed from INT8 layer to INT8 layer (amp::int8::chain_int8_layers)
  std::optional<double> smoothquant;  // alpha: SmoothQuant before calibration
  std::vector<std::string> keep_float;
  int64_t test_limit = 0;
};

struct QuantizeResult {
  std::string model;
  bool language_model = false;
  Int8Comparison comparison;  // the float checkpoint and the INT8 one, both scored here
};

// Writes req.out (never req.checkpoint: a command does not overwrite its
// input). Refuses a checkpoint that is INT8 already, a device without the
// INT8 GEMM (the CPU only, so far), an observer it does not know, and a
// model with no Linear layer calibration reached.
QuantizeResult quantize_checkpoint(const QuantizeRequest& req);

}  // namespace mt::tools
