// `mixtape train`: train a reference model; its options, grouped as
// TrainConfig's fields are (tools/train/trainer.h).
#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/train/trainer.h"

namespace mt::cli {
namespace {

// What is trained, in which precision, where.
void add_model_options(CLI::App* cmd, tools::TrainConfig& c) {
  add_model_option(cmd, c.model, "auto (" + auto_model_help() + ") | " + model_names_help(),
                   /*with_auto=*/true);
  cmd->add_option("--precision", c.precision,
                  "auto (bf16 on a CPU, fp16 on a GPU) | fp32 | fp16 (autocast + GradScaler) | bf16 (autocast)")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16"}));
  cmd->add_flag("--master-weights", c.master_weights, "f16/bf16 parameters with f32 master weights in the optimizer");
  add_device_option(cmd, c.device);
}

// How long, the optimizer and its schedule, the step's options.
void add_optimization_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_option("--epochs", c.epochs, "epochs")->check(CLI::PositiveNumber);
  cmd->add_option("--steps", c.max_steps, "stop after N optimizer steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch", c.batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--lr", c.lr, "peak learning rate")->check(CLI::PositiveNumber);
  cmd->add_option("--optimizer", c.optimizer, "adamw | sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--weight-decay", c.weight_decay, "weight decay (not on biases and norms)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--schedule", c.schedule, "cosine | constant | step")
      ->check(CLI::IsMember({"cosine", "constant", "step"}));
  cmd->add_option("--warmup", c.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  cmd->add_flag("--cuda-graph", c.cuda_graph,
                "capture the whole training step in a CUDA graph once and replay it (cuda or sim device)");
  cmd->add_option("--clip", c.clip, "max gradient norm (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--init-scale", c.init_scale, "fp16: the GradScaler's first loss scale (default 65536)")
      ->check(CLI::PositiveNumber);
  add_seed_option(cmd, c.seed, "random seed (0 to 2^64 - 1)");
}

// Checkpoints, metrics and reports.
void add_output_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_option("--save", c.save, "checkpoint (.safetensors) written each epoch and at the end");
  cmd->add_option("--resume", c.resume, "continue from a checkpoint")->check(CLI::ExistingFile);
  cmd->add_option("--log", c.log, "metrics as JSON lines");
  cmd->add_option("--report", c.report,
                  "write this run's HTML report here at the end (loss, loss scale, gradient norm, throughput, memory "
                  "ledger; one self-contained file)");
  cmd->add_option("--tensorboard", c.tensorboard,
                  "write TensorBoard event files into this folder (loss, lr, loss scale, gradient norm, samples/s, "
                  "memory by category)");
}

// The data: which, where, its windows, augmentation and limits; when to evaluate.
void add_data_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_option("--data", c.data,
                  "the dataset's directory (default: $MT_FASHION_MNIST or the Debian package's for Fashion-MNIST, "
                  "$MT_BROWN_DIR or the cache folder tools/scripts/setup.sh fills for Brown)");
  add_dataset_option(cmd, c.dataset, "auto (the model's kind) | " + dataset_names_help());
  cmd->add_option("--context", c.context, "text models: tokens per window or passage (default: the model's context)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-every", c.eval_every, "also evaluate every N optimizer steps (default: each epoch's end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--augment", c.augment, "random crop and horizontal flip");
  cmd->add_option("--train-limit", c.train_limit, "use only the first N training samples (images or text windows)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--test-limit", c.test_limit, "use only the first N held-out samples")->check(CLI::NonNegativeNumber);
}

// Memory savers, CPU threads and the memory ledger.
void add_memory_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_flag(
      "--checkpoint-activations", c.checkpoint_activations,
      "recompute each block (transformers) or stage (cnn, resnet) in backward instead of keeping its activations");
  cmd->add_flag("--offload-optimizer", c.offload_optimizer,
                "keep master weights and optimizer state in host memory, streamed to the device for each update");
  cmd->add_option("--threads", c.threads,
                  "CPU threads for the kernels (default 0 = auto: timed trials of 1, 2, 4, ... threads up to "
                  "$MT_NUM_THREADS or the cores keep the fastest, and are repeated every few seconds)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  cmd->add_flag("--memory", c.memory,
                "print the memory ledger at the training peak (parameters, gradients, optimizer state, activations, "
                "...) beside its theory");
}

// The data-parallel modes (mpirun -np N).
void add_parallel_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_flag("--shard-optimizer", c.shard_optimizer,
                "ZeRO stage 1 (with mpirun -np N): each rank keeps 1/N of the optimizer state and master weights");
  cmd->add_flag("--ddp", c.ddp,
                "train through DistributedDataParallel even as one process (mpirun -np N > 1 always does); with "
                "MT_DIST_BACKEND=nccl it runs the NCCL path on one GPU");
  cmd->add_flag("--drop-uneven", c.drop_uneven,
                "with mpirun -np N: leave out the last training samples of each epoch that do not split evenly "
                "over the ranks (default: pad the last shards by repeating samples from the epoch's start, as "
                "PyTorch's DistributedSampler)");
}

}  // namespace

Subcommand add_train(CLI::App& app) {
  auto config = std::make_shared<tools::TrainConfig>();
  CLI::App* cmd = app.add_subcommand("train", "Train a reference model (Fashion-MNIST images or Brown text)");
  add_model_options(cmd, *config);
  add_optimization_options(cmd, *config);
  add_output_options(cmd, *config);
  add_data_options(cmd, *config);
  add_memory_options(cmd, *config);
  add_parallel_options(cmd, *config);
  cmd->add_flag("!--no-progress", config->progress, "no live progress line");
  add_diagnostic_options(cmd, *config);
  auto run = [config](const std::string& command_line) {
    config->command = command_line;
    tools::train(*config);
    print_profile();
    return 0;
  };
  return {cmd, run, /*distributed=*/true};
}

}  // namespace mt::cli
