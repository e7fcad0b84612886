// `mixtape info`: devices, memory, versions, datasets and models.
#include <unistd.h>

#include <filesystem>

#include <Eigen/Core>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/allocator.h"
#include "kernels/common/cpu_backend.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "kernels/verify/checks.h"
#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/train/config.h"
#include "tools/train/kernel_verification.h"
#include "tools/data/bpe.h"
#include "tools/data/registry.h"
#if defined(MT_WITH_CUDA)
#include "core/device_info.h"
#endif

namespace mt::cli {
namespace {

void print_devices() {
#if defined(MT_WITH_CUDA)
  const auto devices = cuda::query_devices();
  if (devices.count == 0) {
    std::printf("cuda: built (runtime %d), %s\n", devices.runtime_version,
                devices.error.empty() ? "no devices" : devices.error.c_str());
  } else {
    for (const auto& name : devices.names) std::printf("cuda: %s\n", name.c_str());
  }
#else
  std::printf("cuda: not built\n");
#endif
  try {
    allocator_for(kSIM);
    std::printf("sim: available (CUDA kernels on the SIMT simulator)\n");
  } catch (const Error& e) {
    std::printf("sim: not available: %s\n", e.what());  // the reason, never a guess at it
  }
}

int run_info(const std::string& data_dir) {
  std::printf("mixtape 0.1.0 (g++ %d.%d, C++%ld, Eigen %d.%d.%d)\n", __GNUC__, __GNUC_MINOR__, __cplusplus / 100 % 100,
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  std::printf("cpu: %ld cores, %.1f GiB memory\n", sysconf(_SC_NPROCESSORS_ONLN),
              static_cast<double>(pages) * static_cast<double>(page) / (1 << 30));
  std::printf("cpu gemm: %s\n", kernels::cpu_backend_description().c_str());
  print_devices();
  for (const auto& d : data::dataset_list()) {
    if (d.files_status) std::printf("%s: %s\n", d.name.c_str(), d.files_status(data_dir).c_str());
  }
  const std::filesystem::path bpe = data::default_gpt2_bpe_dir();
  const bool bpe_found = std::filesystem::exists(bpe / "encoder.json") && std::filesystem::exists(bpe / "vocab.bpe");
  std::printf("gpt2 tokenizer: %s (%s)\n", bpe_found ? "found" : ("missing: " + data::gpt2_bpe_fetch_command()).c_str(),
              bpe.string().c_str());
  std::printf("models:\n");
  for (const auto& m : models::model_list()) std::printf("  %-12s %s\n", m.name.c_str(), m.description.c_str());
  return 0;
}

// `info --verify`: every own kernel family's check on the device, each in a
// child process; the table, and the results stored for that GPU.
int run_verify(const std::string& device_name) {
  const Device device = tools::resolve_device(device_name == "auto" ? "cuda" : device_name);
  MT_CHECK(!device.is_cpu(), "info --verify: the CPU runs none of mixtape's own GPU kernels; use --device cuda or sim");
  std::fputs(tools::verification_table(device, tools::verify_families(device)).c_str(), stdout);
  return 0;
}

// `info --check-family F` (what a check's child process runs): one check,
// its result as one JSON line, last on stdout.
int run_check_family(const std::string& name, const std::string& device_name) {
  const std::optional<kernels::verify::OwnFamily> family = kernels::verify::family_named(name);
  MT_CHECK(family.has_value(), "info --check-family '{}': not a kernel family (see `mixtape info --verify`)", name);
  const kernels::verify::CheckResult r = kernels::verify::run_check(*family, tools::resolve_device(device_name));
  const nlohmann::json reply = {{"family", name},
                                {"outcome", kernels::verify::outcome_name(r.outcome)},
                                {"seconds", r.seconds},
                                {"detail", r.detail}};
  std::printf("%s\n", reply.dump().c_str());
  return 0;
}

struct InfoArgs {
  std::string data_dir, device = "auto", check_family;
  bool verify = false;
};

}  // namespace

Subcommand add_info(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info", "Devices, memory, versions, datasets and models");
  cmd->add_option("--data", args->data_dir, "Fashion-MNIST directory");
  cmd->add_flag("--verify", args->verify,
                "check each of mixtape's own GPU kernel families on --device against a known answer (each in a child "
                "process with a time limit, MT_KERNEL_CHECK_TIMEOUT_S) and print the table; on a GPU the results "
                "decide what `auto` runs there");
  add_device_option(cmd, args->device);
  cmd->add_option("--check-family", args->check_family)->group("");  // a check's child process
  return {cmd, [args](const std::string&) {
            if (!args->check_family.empty()) return run_check_family(args->check_family, args->device);
            if (args->verify) return run_verify(args->device);
            return run_info(args->data_dir);
          }};
}

}  // namespace mt::cli
