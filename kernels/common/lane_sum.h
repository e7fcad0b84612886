// A long sum in double, vectorised and still deterministic.
//
// One running `sum += p[i]` is a chain of dependent adds: the CPU waits an
// add's latency (4 cycles) per element and the compiler may not reorder it.
// LaneSum keeps kLanes independent accumulators (element i of each run of
// kLanes goes to lane i), which the compiler turns into vector adds, and
// adds the lanes in one fixed tree at the end. The order depends only on the
// lengths of the runs added, never on the thread count, so a kernel that
// gives each output its own LaneSum stays bit-identical on any number of
// threads.
#pragma once

#include <cstdint>

namespace mt::kernels::cpu {

class LaneSum {
 public:
  static constexpr int kLanes = 8;

  // Adds term(0) .. term(n - 1).
  template <typename Term>
  void add(int64_t n, Term&& term) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int lane = 0; lane < kLanes; ++lane) lanes_[lane] += static_cast<double>(term(i + lane));
    }
    for (int lane = 0; i < n; ++i, ++lane) lanes_[lane] += static_cast<double>(term(i));
  }

  double total() const {
    return ((lanes_[0] + lanes_[1]) + (lanes_[2] + lanes_[3])) + ((lanes_[4] + lanes_[5]) + (lanes_[6] + lanes_[7]));
  }

 private:
  double lanes_[kLanes] = {};
};

}  // namespace mt::kernels::cpu
