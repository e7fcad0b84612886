// MT_GEMM=auto on a GPU: for each GEMM shape, measure cuBLASLt and the own
// kernel once, keep the faster, and remember the answer for the process.
//
// An own kernel wins only if it also agrees with cuBLASLt on the trial's
// output: a rung that is fast but wrong on some GPU (the Hopper rungs are
// checked on the simulator, not on every chip) must never be chosen. Plain
// C++ (the measuring and comparing are passed in), so the decision rules are
// tested without a GPU; kernels/gemm/cuda.cu supplies the CUDA side.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/gemm/api.h"

namespace mt::kernels {

// What the choice depends on: the problem's size, layout and dtype, and
// whether the Hopper rungs can take its operands (else the own kernel is v5).
struct GemmShape {
  KernelDType dtype = KernelDType::F16;  // for FP8: the output's
  int batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false, hopper = false;  // for FP8: trans_a = A in E5M2
  bool fp8 = false;                                        // an FP8 GEMM (v10 against cuBLASLt's FP8)
  bool operator==(const GemmShape&) const = default;
};

struct GemmShapeHash {
  std::size_t operator()(const GemmShape& s) const {
    std::size_t h = static_cast<std::size_t>(s.dtype);
    for (long long v :
         {static_cast<long long>(s.batch), static_cast<long long>(s.m), static_cast<long long>(s.n),
          static_cast<long long>(s.k),
          static_cast<long long>(s.trans_a | (s.trans_b << 1) | (s.hopper << 2) | (s.fp8 << 3))}) {
      h = h * 1000003u ^ std::hash<long long>{}(v);
    }
    return h;
  }
};

struct GemmTrial {
  double own_ms = 0, cublaslt_ms = 0;  // per call
  bool own_agrees = false;             // the own kernel's output matched cuBLASLt's
  GemmBackend winner = GemmBackend::CublasLt;
};

class GemmChooser {
 public:
  // Measure(backend) runs the GEMM with that back end and returns its time
  // per call in ms; OwnAgrees() is asked after both ran. Each is called once
  // per new shape; later calls return the remembered winner.
  using Measure = std::function<double(GemmBackend)>;
  using OwnAgrees = std::function<bool()>;

  GemmBackend choose(const GemmShape& shape, const Measure& measure, const OwnAgrees& own_agrees) {
    if (const std::optional<GemmTrial> known = find(shape)) return known->winner;
    GemmTrial trial;
    trial.own_ms = measure(GemmBackend::Own);
    trial.cublaslt_ms = measure(GemmBackend::CublasLt);
    trial.own_agrees = own_agrees();
    trial.winner = trial.own_agrees && trial.own_ms < trial.cublaslt_ms ? GemmBackend::Own : GemmBackend::CublasLt;
    const std::lock_guard lock(mutex_);
    return trials_.try_emplace(shape, trial).first->second.winner;
  }

  std::optional<GemmTrial> find(const GemmShape& shape) const {
    const std::lock_guard lock(mutex_);
    const auto it = trials_.find(shape);
    if (it == trials_.end()) return std::nullopt;
    return it->second;
  }

  std::vector<std::pair<GemmShape, GemmTrial>> trials() const {
    const std::lock_guard lock(mutex_);
    return {trials_.begin(), trials_.end()};
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<GemmShape, GemmTrial, GemmShapeHash> trials_;
};

}  // namespace mt::kernels
