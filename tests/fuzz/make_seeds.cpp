// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/):
// small valid inputs the fuzzers mutate, so they start inside the formats
// instead of guessing a safetensors header from nothing. Run by hand when a
// format changes; its output is committed.
//   make_seeds <corpus dir>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/safetensors.h"
#include "tests/fuzz/fuzz_run.h"

namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 15 + 16: a gzip header
  std::string out(deflateBound(&z, bytes.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string big_endian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// The IDX target's input: a 2-byte little-endian image-file length, the image file, the label file.
std::string idx_pair(const std::string& images, const std::string& labels) {
  return std::string{static_cast<char>(images.size() & 0xff), static_cast<char>(images.size() >> 8)} + images + labels;
}

void safetensors_seeds(const fs::path& dir) {
  mt::Generator gen(1);
  mt::save_safetensors((dir / "mixed_dtypes").string(),
                       {{"w", mt::randn({2, 3}, mt::kF32, mt::kCPU, &gen)},
                        {"h", mt::randn({3}, mt::kF32, mt::kCPU, &gen).to(mt::kF16)},
                        {"b", mt::randn({2}, mt::kF32, mt::kCPU, &gen).to(mt::kBF16)},
                        {"i", mt::zeros({2}, mt::kI64)}},
                       {{"format", "pt"}});
  mt::save_safetensors((dir / "empty_and_scalar").string(),
                       {{"empty", mt::zeros({0, 4})}, {"scalar", mt::full(mt::Shape{}, 2.5)}});
}

void idx_seeds(const fs::path& dir) {
  const std::string images = big_endian(0x803) + big_endian(2) + big_endian(2) + big_endian(2) +
                             std::string("\x00\x10\x80\xff\x01\x02\x03\x04", 8);
  const std::string labels = big_endian(0x801) + big_endian(2) + std::string("\x03\x09", 2);
  write_file(dir / "plain", idx_pair(images, labels));
  write_file(dir / "gzip", idx_pair(gzip(images), gzip(labels)));
}

void resume_seeds(const fs::path& dir) {
  for (const bool overflowed : {false, true}) {
    mt::fuzz::TinyRun run;
    mt::Generator gen(2);
    const mt::Tensor x = mt::randn({8, 3}, mt::kF32, mt::kCPU, &gen);
    const mt::Tensor y = mt::argmax(mt::randn({8, 2}, mt::kF32, mt::kCPU, &gen), 1);
    for (int step = 0; step < 2; ++step) {
      run.optimizer.zero_grad();
      mt::Tensor logits;
      {
        mt::amp::Fp8Autocast region(run.fp8);  // so the seeds carry delayed FP8 state for the fuzzer to bend
        logits = run.model(x);
      }
      const mt::Tensor loss = mt::cross_entropy(logits, y);
      run.scaler.scale(overflowed ? loss * 1e38 : loss).backward();
      run.fp8.update();
      run.scaler.step(run.optimizer);
      run.scaler.update();
      run.schedule.step();
    }
    mt::tools::save_checkpoint((dir / (overflowed ? "after_skipped_steps" : "after_two_steps")).string(), run.config,
                               run.model, run.optimizer.state_dict(), run.scaler, run.schedule,
                               {.epoch = 0, .sample_in_epoch = 8, .step = 2}, &run.fp8);
  }
}

void brown_seeds(const fs::path& dir) {
  write_file(dir / "sentences", std::string(1, '\x07') + "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ./.\n\n" +
                                    "\tIt/pps ``/`` was/bedz '/' a/at ''/'' thing/nn ./.\n");
  write_file(dir / "no_final_newline", std::string(1, '\x2a') + "\tOne/cd a/b/c /x ./.");
}

void options_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"device", "cuda:1"}, {"precision", "bf16"}, {"bytes", "1.5GiB"}, {"alloc_conf", "max_split_size_mb:256"}};
  for (const auto& [name, text] : seeds) write_file(dir / name, text);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* target : {"safetensors", "idx", "resume", "brown", "options"}) fs::create_directories(root / target);
  safetensors_seeds(root / "safetensors");
  idx_seeds(root / "idx");
  resume_seeds(root / "resume");
  brown_seeds(root / "brown");
  options_seeds(root / "options");
  // The checkpoints of resume/ are safetensors files too.
  for (const auto& entry : fs::directory_iterator(root / "resume")) {
    fs::copy_file(entry.path(), root / "safetensors" / ("checkpoint_" + entry.path().filename().string()),
                  fs::copy_options::overwrite_existing);
  }
  std::printf("make_seeds: wrote the corpus under %s\n", root.c_str());
  return 0;
}
