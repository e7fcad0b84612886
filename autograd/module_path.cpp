#include "autograd/module_path.h"

#include <vector>

namespace mt::autograd {
namespace {
thread_local int module_path_users = 0;
thread_local std::vector<std::string> module_paths;
const std::string kTopLevel;
}  // namespace

bool module_paths_wanted() { return module_path_users > 0; }
void push_module_path(std::string path) { module_paths.push_back(std::move(path)); }
void pop_module_path() {
  if (!module_paths.empty()) module_paths.pop_back();
}
const std::string& current_module_path() { return module_paths.empty() ? kTopLevel : module_paths.back(); }
std::string module_path_for_display(const std::string& path) { return path.empty() ? "(model)" : path; }

namespace detail {
void add_module_path_user(int delta) { module_path_users += delta; }
}  // namespace detail

}  // namespace mt::autograd
