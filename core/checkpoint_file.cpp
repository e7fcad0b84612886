#include "core/checkpoint_file.h"

#include <charconv>
#include <cmath>
#include <set>

#include "core/generator.h"
#include "core/safetensors.h"

namespace mt {

namespace {

constexpr const char* kModelPart = "model";

std::string prefix_of(const std::string& part) { return part == kModelPart ? "" : part + "."; }

void check_part_names(const CheckpointParts& parts) {
  std::set<std::string> names;
  for (const auto& [name, part] : parts) {
    MT_CHECK(!name.empty() && name.find('.') == std::string::npos,
             "checkpoint: part name '{}' must be non-empty and without '.'", name);
    MT_CHECK(names.insert(name).second, "checkpoint: part '{}' is given twice", name);
  }
}

uint64_t metadata_u64(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  const auto it = f.metadata.find(key);
  MT_CHECK(it != f.metadata.end(), "checkpoint '{}' has no '{}' in its metadata (not a mixtape checkpoint?)", path,
           key);
  uint64_t value = 0;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  MT_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty(),
           "checkpoint '{}': metadata '{}' = '{}' is not a whole number", path, key, text);
  return value;
}

// The tensors of part `name` (under its prefix, which is stripped).
TensorMap part_tensors(const SafetensorsFile& f, const std::string& name, const CheckpointParts& parts) {
  TensorMap out;
  for (const auto& [key, t] : f.tensors) {
    if (name == kModelPart) {
      // The model's keys are the ones no other part's prefix claims.
      bool other = false;
      for (const auto& [part, ref] : parts) other = other || (part != kModelPart && key.starts_with(part + "."));
      if (!other) out[key] = t;
    } else if (key.starts_with(name + ".")) {
      out[key.substr(name.size() + 1)] = t;
    }
  }
  return out;
}

// A NaN or inf in a file is refused before anything is loaded (as `mixtape
// train --resume` refuses it): training from it would only spread it.
void check_finite(const SafetensorsFile& f, const std::string& path) {
  for (const auto& [key, tensor] : f.tensors) {
    const Tensor& t = tensor;  // (a lambda may not capture a structured binding in C++20 as clang 14 reads it)
    if (!is_floating(t.dtype())) continue;
    bool finite = true;
    for_each_offset(t.sizes(), t.strides(), t.offset(),
                    [&](int64_t at) { finite = finite && std::isfinite(read_element(t, at)); });
    MT_CHECK(finite, "checkpoint '{}': tensor '{}' holds NaN or inf; refusing to load it", path, key);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointParts& parts) {
  check_part_names(parts);
  TensorMap tensors;
  for (const auto& [name, part] : parts) {
    for (const auto& [key, t] : part.state_dict()) {
      const std::string stored = prefix_of(name) + key;
      MT_CHECK(tensors.emplace(stored, t).second, "checkpoint: two parts store '{}'", stored);
    }
  }
  const GeneratorState rng = default_generator().state();
  save_safetensors(path, tensors,
                   {{"format", "mixtape-checkpoint-1"},
                    {"rng_seed", std::to_string(rng.seed)},
                    {"rng_offset", std::to_string(rng.offset)}});
}

void load_checkpoint(const std::string& path, const CheckpointParts& parts) {
  check_part_names(parts);
  const SafetensorsFile f = load_safetensors(path);
  const GeneratorState rng{metadata_u64(f, "rng_seed", path), metadata_u64(f, "rng_offset", path)};
  check_finite(f, path);
  std::vector<TensorMap> states;
  size_t claimed = 0;
  for (const auto& [name, part] : parts) {
    states.push_back(part_tensors(f, name, parts));
    MT_CHECK(!states.back().empty() || part.state_dict().empty(), "checkpoint '{}' holds nothing for part '{}'", path,
             name);
    claimed += states.back().size();
  }
  MT_CHECK(claimed == f.tensors.size(),
           "checkpoint '{}' holds {} tensors that belong to none of the parts given (each part other than 'model' "
           "is stored under '<part>.')",
           path, f.tensors.size() - claimed);
  for (size_t i = 0; i < parts.size(); ++i) {
    try {
      parts[i].second.load_state_dict(states[i]);
    } catch (const Error& e) {
      fail("checkpoint '{}': part '{}' does not load: {}", path, parts[i].first, e.what());
    }
  }
  default_generator().set_state(rng);
}

}  // namespace mt
