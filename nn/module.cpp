#include "nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "autograd/module_path.h"
#include "autograd/ops.h"

namespace mt::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor& slot, Tensor value) {
  MT_CHECK(is_compute_float(value.dtype()), "register_parameter '{}': parameters must be f64, f32, f16 or bf16, got {}",
           name, value.dtype());
  slot = value.detach();
  slot.requires_grad_();
  tag_memory(slot, MemoryCategory::Parameters);
  parameters_.emplace_back(name, &slot);
  return slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& slot, Tensor value) {
  slot = value.detach();
  tag_memory(slot, MemoryCategory::Parameters);  // the model's state, with its parameters
  buffers_.emplace_back(name, &slot);
  return slot;
}

std::string Module::name() const {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status), &std::free);
  std::string full = status == 0 && demangled ? demangled.get() : typeid(*this).name();
  // "(anonymous namespace)::Block" and "mt::models::Gpt" -> the last name.
  const size_t template_start = full.find('<');
  const size_t last_colon = full.rfind("::", template_start);
  return last_colon == std::string::npos ? full : full.substr(last_colon + 2);
}

Tensor Module::forward(const Tensor&) {
  fail("{} has no single-input forward(x): call the forward it declares (e.g. module->forward(x, mask)){}", name(),
       name() == "ModuleList" ? ", or iterate over the ModuleList's modules" : "");
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  std::function<void(const std::string&, Module&)> visit = [&](const std::string& prefix, Module& m) {
    if (!seen.insert(&m).second) return;
    out.emplace_back(prefix, &m);
    for (const auto& [name, child] : m.children_) visit(prefix.empty() ? name : prefix + "." + name, *child);
  };
  visit("", *this);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (const auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

namespace {

// 1234567 -> "1,234,567"
std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_tree(std::ostream& out, const Module& m, const std::string& indent) {
  const std::string extra = m.extra_repr();
  if (m.children().empty()) {
    out << m.name() << "(" << extra;
  } else {
    // As PyTorch: the arguments on their own line above the children.
    out << m.name() << "(\n";
    if (!extra.empty()) out << indent << "  " << extra << "\n";
    for (const auto& [name, child] : m.children()) {
      out << indent << "  (" << name << "): ";
      print_tree(out, *child, indent + "  ");
      out << "\n";
    }
    out << indent;
  }
  out << ")";
  if (const int64_t n = m.parameter_count(); n > 0) out << "  # " << with_thousands(n) << " parameters";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Module& module) {
  print_tree(out, module, "");
  return out;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  MT_CHECK(module != nullptr, "register_module '{}': null module", name);
  children_.emplace_back(name, std::move(module));
}

template <typename Fn>
void Module::visit_tensors(const std::string& prefix, bool parameters, Fn&& fn) const {
  for (const auto& [name, slot] : parameters ? parameters_ : buffers_) fn(prefix + name, *slot, *this);
  for (const auto& [name, child] : children_) child->visit_tensors(prefix + name + ".", parameters, fn);
}

// A tensor registered under two names (weights tied by assignment,
// b->weight = a->weight) is yielded once, under the first name, as
// PyTorch's named_parameters(remove_duplicate=True): an optimizer given
// both would update it twice per step. state_dict() keeps both names.
std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  visit_tensors("", true, [&](const std::string& n, const Tensor& t, const Module&) {
    if (seen.insert(t.impl()).second) out.emplace_back(n, t);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit_tensors("", false, [&](const std::string& n, const Tensor& t, const Module&) { out.emplace_back(n, t); });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.impl()->grad.reset();
}

namespace {

// Makes `slot` hold `moved`'s data in place: the handle (and every copy of
// it: an optimizer's, a tied module's, the user's) keeps its identity and
// now sees the new storage, dtype and device, as PyTorch's module.to()
// sets param.data.
void assign_in_place(const Tensor& slot, const Tensor& moved) {
  TensorImpl& impl = *slot.impl();
  const TensorImpl& from = *moved.impl();
  impl.storage = from.storage;
  impl.sizes = from.sizes;
  impl.strides = from.strides;
  impl.offset = from.offset;
  impl.dtype = from.dtype;
  impl.device = from.device;
  tag_memory(slot, MemoryCategory::Parameters);
}

// slot = convert(slot) in place, and its gradient, if any, the same way.
template <typename Convert>
void convert_in_place(const Tensor& slot, Convert&& convert) {
  const Tensor moved = convert(slot.detach());
  if (moved.storage() != slot.storage() || moved.dtype() != slot.dtype()) assign_in_place(slot, moved);
  if (slot.impl()->grad) {
    const Tensor grad(slot.impl()->grad);
    const Tensor moved_grad = convert(grad);
    if (moved_grad.storage() != grad.storage() || moved_grad.dtype() != grad.dtype()) assign_in_place(grad, moved_grad);
  }
}

}  // namespace

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto* list : {&parameters_, &buffers_}) {
    for (auto& [name, slot] : *list) convert_in_place(*slot, [device](const Tensor& t) { return t.to(device); });
  }
  for (auto& [name, child] : children_) child->to(device);
}

void Module::to(DType dtype, bool keep_norms_fp32) {
  MT_CHECK(is_compute_float(dtype), "Module::to: can only cast to f64, f32, f16 or bf16, got {}", dtype);
  NoGradGuard no_grad;
  const DType target = keep_norms_fp32 && is_norm_layer() ? kF32 : dtype;
  for (auto* list : {&parameters_, &buffers_}) {
    for (auto& [name, slot] : *list) {
      if (!is_floating(slot->dtype())) continue;  // e.g. num_batches_tracked stays an integer
      if (list == &buffers_ && keeps_f32_buffers()) continue;
      convert_in_place(*slot, [target](const Tensor& t) { return t.to(target); });
    }
  }
  for (auto& [name, child] : children_) child->to(dtype, keep_norms_fp32);
}

StateDict Module::state_dict() const {
  StateDict out;
  visit_tensors("", true, [&](const std::string& n, const Tensor& t, const Module&) { out[n] = t.detach(); });
  visit_tensors("", false, [&](const std::string& n, const Tensor& t, const Module&) { out[n] = t.detach(); });
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  // Check everything first: a failed load leaves the model as it was.
  std::set<std::string> expected;
  std::vector<std::string> missing;
  auto check = [&](const std::string& name, const Tensor& slot, const Module&) {
    expected.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      return;
    }
    MT_CHECK(it->second.sizes() == slot.sizes(), "load_state_dict: '{}' has shape {} in the state but {} in the model",
             name, it->second.shape_string(), slot.shape_string());
    // INT8 values mean something only with their scales: converting them to
    // or from a float slot would load garbage without a word.
    MT_CHECK((it->second.dtype() == kI8) == (slot.dtype() == kI8),
             "load_state_dict: '{}' is {} in the state but {} in the model: an INT8 (quantized) tensor loads only "
             "into a layer made INT8 first (amp/int8_quantize.h), and only from an INT8 checkpoint",
             name, it->second.dtype(), slot.dtype());
  };
  visit_tensors("", true, check);
  visit_tensors("", false, check);
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : state) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  MT_CHECK(!strict || (missing.empty() && unexpected.empty()),
           "load_state_dict: {} missing key(s) [{}] and {} unexpected key(s) [{}]", missing.size(),
           fmt::join(missing, ", "), unexpected.size(), fmt::join(unexpected, ", "));

  NoGradGuard no_grad;
  auto load = [&](const std::string& name, const Tensor& slot, const Module&) {
    auto it = state.find(name);
    if (it == state.end()) return;
    copy_(slot, it->second);
  };
  visit_tensors("", true, load);
  visit_tensors("", false, load);
}

// ---------------------------------------------------------------- forward scopes

namespace {

thread_local std::vector<const Module*> running_modules;

// The dotted path of `target` below `from` ("" when it is `from`), or false.
bool find_path(const Module& from, const Module& target, std::string& path) {
  if (&from == &target) return true;
  for (const auto& [name, child] : from.children()) {
    std::string below;
    if (!find_path(*child, target, below)) continue;
    path = below.empty() ? name : name + "." + below;
    return true;
  }
  return false;
}

}  // namespace

namespace {

std::mutex observers_mutex;
std::vector<ForwardScope::Observer*> observers;
std::atomic<bool> have_observers{false};  // the one test a forward pays when there are none

std::vector<ForwardScope::Observer*> current_observers() {
  const std::lock_guard lock(observers_mutex);
  return observers;
}

}  // namespace

void ForwardScope::add_observer(Observer* observer) {
  const std::lock_guard lock(observers_mutex);
  observers.push_back(observer);
  have_observers = true;
}

void ForwardScope::remove_observer(Observer* observer) {
  const std::lock_guard lock(observers_mutex);
  observers.erase(std::remove(observers.begin(), observers.end(), observer), observers.end());
  have_observers = !observers.empty();
}

ForwardScope::ForwardScope(const Module& module) {
  if (have_observers) {
    for (Observer* o : current_observers()) o->entering(module);
    observed_ = &module;
  }
  if (!autograd::module_paths_wanted()) return;
  std::string path;  // the outermost module is the model itself: ""
  if (!running_modules.empty()) {
    const std::string& parent = autograd::current_module_path();
    std::string below;
    if (find_path(*running_modules.back(), module, below) && !below.empty()) {
      path = parent.empty() ? below : parent + "." + below;
    } else {
      path = parent;  // not a child of its caller: report under the caller
    }
  }
  running_modules.push_back(&module);
  autograd::push_module_path(std::move(path));
  pushed_ = true;
}

ForwardScope::~ForwardScope() {
  if (observed_ != nullptr && have_observers) {
    for (Observer* o : current_observers()) o->leaving(*observed_);
  }
  if (!pushed_) return;
  running_modules.pop_back();
  autograd::pop_module_path();
}

}  // namespace mt::nn
