// Verified-only defaults: which of mixtape's own GPU kernel families `auto`
// may run on a device.
//
// Why: the own kernels (the GEMM rungs, the fused attention, the INT8 rung)
// are tested on the SIMT simulator in CI, and most of them have never run on
// a GPU. A detail of real hardware (an mbarrier phase, a descriptor bit) can
// still differ, and then a user's first GEMM hangs or a model trains on wrong
// numbers. So on a real GPU an own family serves `auto` only after its
// known-answer check (kernels/verify/checks.h) passed on that device: that
// chip, that driver, that build of the kernels. Results are kept in a cache
// file; without a "verified" entry the family's fallback serves (cuBLASLt,
// or attention's reference path), with one warning naming it. The INT8 rung
// and the FP8 kernels have no fallback on a GPU: unverified, they are an
// error. (INT8's other path, cuBLASLt's s8 GEMM, runs own kernels around it,
// so it is a family here too.)
//
// Who runs the checks: `mixtape info --verify` (every family, a table) and
// `mixtape train` (the families the cache lacks, before it touches the GPU),
// each check in a child process with a time limit
// (tools/train/kernel_verification.h), so a hang becomes "timed out".
// MT_GEMM=own and MT_ATTENTION=own still force the own kernels.
//
// On the simulator the checks are CI's own tests, so `sim` trusts every
// family, unless MT_SIM_GPU_IDENTITY names a GPU ("name;major.minor;driver",
// e.g. "NVIDIA H200;9.0;13000"): then `sim` is treated as that GPU, which is
// how these rules are tested without one. (The simulator has no cuBLASLt:
// there the GEMM's fallback is the ladder's v1 rung, standing in for it.)
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"

namespace mt::kernels::verify {

enum class OwnFamily : int {
  GemmV7,
  GemmV5,
  GemmV3,
  GemmV2,
  AttentionV3,
  AttentionV2,
  Int8Mma,
  Int8Vendor,
  Fp8,
  GemmV10Fp8
};

struct OwnFamilyInfo {
  OwnFamily family;
  const char* name;      // "gemm.v7": what the cache, the table and --family use
  const char* kernel;    // what it is and when `auto` picks it
  const char* fallback;  // what serves instead when it is not verified
  int min_major;         // the smallest compute capability that can run it
  int max_major;         // the largest (v7's wgmma is sm_90 only); 0 for no limit
};

// Every family, in the order the table prints them.
const std::vector<OwnFamilyInfo>& own_families();
const OwnFamilyInfo& family_info(OwnFamily family);
std::optional<OwnFamily> family_named(std::string_view name);

enum class CheckOutcome { Verified, Failed, TimedOut, NotApplicable };
const char* outcome_name(CheckOutcome outcome);  // "verified", "failed", "timed out", "not applicable"
std::optional<CheckOutcome> outcome_named(std::string_view name);

struct CheckResult {
  OwnFamily family = OwnFamily::GemmV7;
  CheckOutcome outcome = CheckOutcome::Failed;
  double seconds = 0;
  std::string detail;  // the largest error, an exception's message, the time limit
};

// The device a result holds for: the chip, its driver and this build of the
// kernels (a hash of their sources, made by the build), so a new driver or a
// changed kernel is checked again.
struct DeviceIdentity {
  std::string name;
  int major = 0, minor = 0;
  int driver_version = 0;
  std::string kernels_build;
  std::string key() const;          // the cache's key for it
  std::string description() const;  // "NVIDIA H200 (sm_90, driver 13.0)"
};

// The hash of the kernel sources this binary was built from.
std::string kernels_build_id();

// The identity whose results decide for kernels run on `device`: a CUDA
// device's, or MT_SIM_GPU_IDENTITY's on sim; nullopt where nothing needs
// verifying (the CPU, sim without it). A malformed MT_SIM_GPU_IDENTITY is an
// mt::Error.
std::optional<DeviceIdentity> identity_for(Device device);

// What serves `auto` on `device` where `family` is not verified (on the
// simulator the v1 rung stands in for cuBLASLt).
std::string fallback_on(OwnFamily family, Device device);

// Can this chip run the family at all (its compute capability)?
bool family_applies(OwnFamily family, const DeviceIdentity& identity);

// The results file: $MT_CACHE_DIR/kernel_checks.json, else
// $XDG_CACHE_HOME/mixtape/..., else ~/.cache/mixtape/...
std::filesystem::path check_cache_file();
// The stored results for `identity` (families never checked are absent). The
// file is validated: one that is not the expected JSON is ignored with a
// warning (and replaced on the next store), never trusted.
std::map<OwnFamily, CheckResult> cached_results(const DeviceIdentity& identity);
// Adds (or replaces) results for `identity`, under a lock and by an atomic
// rename, so concurrent processes (ranks) do not lose each other's entries.
void store_results(const DeviceIdentity& identity, const std::vector<CheckResult>& results);

// May `auto` run `family` on `device`? True on the CPU and plain sim; else
// only when the cache holds "verified" for the device's identity. The cache
// is read once per device per process; forget_trust() makes the next call
// read it again (after checks ran).
bool own_family_trusted(OwnFamily family, Device device);
// One warning per family and device per process: the family is not verified
// on the device, what serves instead, and how to verify it.
void warn_untrusted(OwnFamily family, Device device);
void forget_trust();

// While one lives, this thread trusts `family`: its check runs the family's
// kernels through the same dispatchers that refuse them unverified.
class FamilyUnderCheck {
 public:
  explicit FamilyUnderCheck(OwnFamily family);
  ~FamilyUnderCheck();
  FamilyUnderCheck(const FamilyUnderCheck&) = delete;
  FamilyUnderCheck& operator=(const FamilyUnderCheck&) = delete;
};

}  // namespace mt::kernels::verify
