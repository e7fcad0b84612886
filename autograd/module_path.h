// Which module's forward is running: a thread-local stack of dotted module
// paths ("blocks.3.attn"), pushed by nn::ForwardScope. Only the debugging
// aids read it (anomaly mode, the autocast dtype report), so nothing is
// pushed unless one of them is on: the cost when off is one flag test per
// module call.
#pragma once

#include <string>

namespace mt::autograd {

// True while anomaly mode or a dtype recorder is active on this thread.
bool module_paths_wanted();
void push_module_path(std::string path);
void pop_module_path();
// The innermost module's path; "" at the model's top level or outside any module.
const std::string& current_module_path();
// The path as the reports print it: "(model)" for the top level.
std::string module_path_for_display(const std::string& path);

namespace detail {
// Counts the switches that want module paths (anomaly mode, dtype recorders).
void add_module_path_user(int delta);
}  // namespace detail

}  // namespace mt::autograd
