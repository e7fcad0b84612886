// `mixtape info`: devices, memory, versions, datasets and models.
#include <unistd.h>

#include <filesystem>

#include <Eigen/Core>
#include <cstdio>
#include <memory>

#include "core/allocator.h"
#include "kernels/common/cpu_backend.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "tools/cli/subcommands.h"
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

}  // namespace

Subcommand add_info(CLI::App& app) {
  auto data_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Devices, memory, versions, datasets and models");
  cmd->add_option("--data", *data_dir, "Fashion-MNIST directory");
  return {cmd, [data_dir](const std::string&) { return run_info(*data_dir); }};
}

}  // namespace mt::cli
