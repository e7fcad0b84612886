// Verified-only defaults: the families, the device identity, the results
// cache and the trust rule (see trust.h).
#include "kernels/verify/trust.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kernels/verify/kernels_build_id.h"  // generated: MT_KERNELS_BUILD_ID
#include "runtime/error.h"
#if defined(MT_WITH_CUDA)
#include "core/device_info.h"
#endif

namespace mt::kernels::verify {

const std::vector<OwnFamilyInfo>& own_families() {
  static const std::vector<OwnFamilyInfo> families = {
      {OwnFamily::GemmV7, "gemm.v7", "GEMM f16/bf16, TMA + wgmma, warp-specialized (ladder/v7), Hopper", "cuBLASLt", 9,
       9},
      {OwnFamily::GemmV5, "gemm.v5", "GEMM f16/bf16, cp.async + mma.sync (ladder/v5), off Hopper", "cuBLASLt", 8, 0},
      {OwnFamily::GemmV3, "gemm.v3", "GEMM f32, register-blocked, true FP32 (ladder/v3)", "cuBLASLt", 7, 0},
      {OwnFamily::GemmV2, "gemm.v2", "GEMM f64, shared-memory tiles (ladder/v2)", "cuBLASLt", 7, 0},
      {OwnFamily::AttentionV3, "attention.v3", "fused attention f16/bf16 on mma.sync, forward and backward",
       "the reference path (GEMM, softmax, GEMM)", 8, 0},
      {OwnFamily::AttentionV2, "attention.v2", "fused attention, scalar f32 math, forward and backward",
       "the reference path (GEMM, softmax, GEMM)", 7, 0},
      {OwnFamily::Int8Mma, "int8.v9", "INT8 GEMM u8 x s8 on mma.sync (ladder/v9)",
       "none: INT8 layers refuse to run (use the CPU)", 8, 0},
      {OwnFamily::Int8Vendor, "int8.cublaslt",
       "INT8 GEMM by cuBLASLt's s8 GEMM between an own u8 -> s8 shift and epilogue (gemm/int8_vendor.cu)",
       "int8.v9 where it is verified, else INT8 layers refuse to run", 7, 0},
      {OwnFamily::Fp8, "fp8",
       "FP8 amax, quantize (per tensor, 1 x 128 tiles), dequantize, the GEMM's scaling (kernels/fp8)",
       "none: --precision fp8 refuses to run (use the CPU)", 7, 0},
      {OwnFamily::GemmV10Fp8, "gemm.v10", "FP8 GEMM on wgmma k32 with per-tensor or block scales (ladder/v10), Hopper",
       "FP8 widened to bf16/f32 GEMMs per K block, then the scaling step", 9, 9},
  };
  return families;
}

const OwnFamilyInfo& family_info(OwnFamily family) { return own_families().at(static_cast<size_t>(family)); }

std::optional<OwnFamily> family_named(std::string_view name) {
  for (const OwnFamilyInfo& f : own_families()) {
    if (name == f.name) return f.family;
  }
  return std::nullopt;
}

namespace {
constexpr const char* kOutcomeNames[] = {"verified", "failed", "timed out", "not applicable"};
constexpr const char* kCacheFormat = "mixtape-kernel-checks-1";
}  // namespace

const char* outcome_name(CheckOutcome outcome) { return kOutcomeNames[static_cast<int>(outcome)]; }

std::optional<CheckOutcome> outcome_named(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kOutcomeNames[i]) return static_cast<CheckOutcome>(i);
  }
  return std::nullopt;
}

std::string kernels_build_id() { return MT_KERNELS_BUILD_ID; }

std::string DeviceIdentity::key() const {
  return fmt::format("{}|sm_{}{}|driver {}|kernels {}", name, major, minor, driver_version, kernels_build);
}

std::string DeviceIdentity::description() const {
  return fmt::format("{} (sm_{}{}, driver {}.{})", name, major, minor, driver_version / 1000,
                     driver_version % 1000 / 10);
}

namespace {

// MT_SIM_GPU_IDENTITY = "name;major.minor;driver".
DeviceIdentity parse_sim_identity(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ';');) parts.push_back(part);
  DeviceIdentity identity;
  int consumed = 0;
  const bool ok = parts.size() == 3 && !parts[0].empty() &&
                  std::sscanf(parts[1].c_str(), "%d.%d%n", &identity.major, &identity.minor, &consumed) == 2 &&
                  consumed == static_cast<int>(parts[1].size()) &&
                  std::sscanf(parts[2].c_str(), "%d%n", &identity.driver_version, &consumed) == 1 &&
                  consumed == static_cast<int>(parts[2].size()) && identity.major > 0;
  MT_CHECK(ok, "MT_SIM_GPU_IDENTITY='{}': expected \"name;major.minor;driver\", e.g. \"NVIDIA H200;9.0;13000\"", text);
  identity.name = parts[0];
  return identity;
}

}  // namespace

std::optional<DeviceIdentity> identity_for(Device device) {
  std::optional<DeviceIdentity> identity;
  if (device.is_sim()) {
    const char* fake = std::getenv("MT_SIM_GPU_IDENTITY");
    if (fake == nullptr || *fake == '\0') return std::nullopt;
    identity = parse_sim_identity(fake);
  } else if (device.is_cuda()) {
#if defined(MT_WITH_CUDA)
    std::string why;
    const std::optional<cuda::GpuIdentity> gpu = cuda::query_identity(device.index, &why);
    MT_CHECK(gpu.has_value(), "kernel verification: {}: {}", device.str(), why);
    identity = DeviceIdentity{gpu->name, gpu->major, gpu->minor, gpu->driver_version, ""};
#else
    fail("kernel verification: {}: this build has no CUDA", device.str());
#endif
  } else {
    return std::nullopt;
  }
  identity->kernels_build = kernels_build_id();
  return identity;
}

std::string fallback_on(OwnFamily family, Device device) {
  const OwnFamilyInfo& f = family_info(family);
  if (device.is_sim() && std::string_view(f.fallback) == "cuBLASLt") {
    return "the v1 rung (standing in for cuBLASLt, which the simulator lacks)";
  }
  return f.fallback;
}

bool family_applies(OwnFamily family, const DeviceIdentity& identity) {
  const OwnFamilyInfo& f = family_info(family);
  return identity.major >= f.min_major && (f.max_major == 0 || identity.major <= f.max_major);
}

std::filesystem::path check_cache_file() {
  auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  std::filesystem::path dir;
  if (const char* own = set("MT_CACHE_DIR")) {
    dir = own;
  } else if (const char* xdg = set("XDG_CACHE_HOME")) {
    dir = std::filesystem::path(xdg) / "mixtape";
  } else {
    const char* home = set("HOME");
    dir = std::filesystem::path(home != nullptr ? home : ".") / ".cache" / "mixtape";
  }
  return dir / "kernel_checks.json";
}

namespace {

// The whole file, validated; an empty document where there is none or it is
// not ours (with a warning: it is replaced on the next store).
nlohmann::json read_cache(const std::filesystem::path& file) {
  nlohmann::json empty = {{"format", kCacheFormat}, {"devices", nlohmann::json::object()}};
  std::ifstream in(file);
  if (!in) return empty;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto valid_entry = [](const nlohmann::json& e) {
    return e.is_object() && e.contains("outcome") && e["outcome"].is_string() &&
           outcome_named(e["outcome"].get<std::string>()).has_value() && e.contains("seconds") &&
           e["seconds"].is_number() && (!e.contains("detail") || e["detail"].is_string());
  };
  bool valid = doc.is_object() && doc.value("format", "") == kCacheFormat && doc.contains("devices") &&
               doc["devices"].is_object();
  for (auto device = valid ? doc["devices"].begin() : doc.end(); valid && device != doc["devices"].end(); ++device) {
    valid = device->is_object();
    for (auto entry = valid ? device->begin() : device->end(); valid && entry != device->end(); ++entry) {
      valid = family_named(entry.key()).has_value() && valid_entry(*entry);
    }
  }
  if (!valid) {
    spdlog::warn("kernel verification: {} is not a results file mixtape wrote; ignoring it (checks run again)",
                 file.string());
    return empty;
  }
  return doc;
}

// An exclusive lock on <file>.lock for as long as it lives.
class CacheLock {
 public:
  explicit CacheLock(const std::filesystem::path& file) {
    const std::string path = file.string() + ".lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::map<OwnFamily, CheckResult> cached_results(const DeviceIdentity& identity) {
  const nlohmann::json doc = read_cache(check_cache_file());
  std::map<OwnFamily, CheckResult> results;
  const auto device = doc["devices"].find(identity.key());
  if (device == doc["devices"].end()) return results;
  for (auto entry = device->begin(); entry != device->end(); ++entry) {
    CheckResult r;
    r.family = *family_named(entry.key());
    r.outcome = *outcome_named((*entry)["outcome"].get<std::string>());
    r.seconds = (*entry)["seconds"].get<double>();
    r.detail = entry->value("detail", "");
    results[r.family] = r;
  }
  return results;
}

void store_results(const DeviceIdentity& identity, const std::vector<CheckResult>& results) {
  const std::filesystem::path file = check_cache_file();
  std::error_code error;
  std::filesystem::create_directories(file.parent_path(), error);
  MT_CHECK(!error, "kernel verification: cannot create {}: {}", file.parent_path().string(), error.message());
  const CacheLock lock(file);
  nlohmann::json doc = read_cache(file);
  nlohmann::json& entries = doc["devices"][identity.key()];
  if (!entries.is_object()) entries = nlohmann::json::object();
  for (const CheckResult& r : results) {
    entries[family_info(r.family).name] = {
        {"outcome", outcome_name(r.outcome)}, {"seconds", r.seconds}, {"detail", r.detail}};
  }
  const std::filesystem::path temporary = file.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary);
    out << doc.dump(2) << '\n';
    MT_CHECK(out.good(), "kernel verification: cannot write {}", temporary.string());
  }
  std::filesystem::rename(temporary, file, error);
  MT_CHECK(!error, "kernel verification: cannot replace {}: {}", file.string(), error.message());
  forget_trust();
}

namespace {

struct TrustTable {
  std::mutex mutex;
  // per device (type, index): the identity (if any) and the verified families
  std::map<std::pair<int, int>, std::optional<std::set<OwnFamily>>> verified;
  std::set<std::tuple<int, int, int>> warned;
};

TrustTable& trust_table() {
  static TrustTable table;
  return table;
}

std::pair<int, int> device_key(Device device) { return {static_cast<int>(device.type), device.index}; }

}  // namespace

namespace {
thread_local int family_under_check = -1;
}  // namespace

FamilyUnderCheck::FamilyUnderCheck(OwnFamily family) { family_under_check = static_cast<int>(family); }
FamilyUnderCheck::~FamilyUnderCheck() { family_under_check = -1; }

bool own_family_trusted(OwnFamily family, Device device) {
  if (device.is_cpu() || family_under_check == static_cast<int>(family)) return true;
  TrustTable& table = trust_table();
  const std::lock_guard lock(table.mutex);
  auto it = table.verified.find(device_key(device));
  if (it == table.verified.end()) {
    std::optional<std::set<OwnFamily>> verified;  // nullopt: nothing to verify on this device
    if (const std::optional<DeviceIdentity> identity = identity_for(device)) {
      verified.emplace();
      for (const auto& [f, result] : cached_results(*identity)) {
        if (result.outcome == CheckOutcome::Verified && family_applies(f, *identity)) verified->insert(f);
      }
    }
    it = table.verified.emplace(device_key(device), std::move(verified)).first;
  }
  return !it->second.has_value() || it->second->count(family) > 0;
}

void warn_untrusted(OwnFamily family, Device device) {
  TrustTable& table = trust_table();
  {
    const std::lock_guard lock(table.mutex);
    if (!table.warned.emplace(static_cast<int>(device.type), device.index, static_cast<int>(family)).second) return;
  }
  const OwnFamilyInfo& f = family_info(family);
  const std::optional<DeviceIdentity> identity = identity_for(device);
  spdlog::warn(
      "{} ({}) has not passed its check on {}{}: using {} instead; run `mixtape info --verify --device {}` to check "
      "it",
      f.name, f.kernel, device.str(), identity ? " = " + identity->description() : "", fallback_on(family, device),
      device.str());
}

void forget_trust() {
  TrustTable& table = trust_table();
  const std::lock_guard lock(table.mutex);
  table.verified.clear();
}

}  // namespace mt::kernels::verify
