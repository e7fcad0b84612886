// `mixtape train`: train a reference model; its options, grouped as
// TrainConfig's parts are (tools/train/config.h). The choices are parsed
// here, once: --precision, --optimizer and --schedule as CLI11 reads them,
// --device when the command runs.
#include <memory>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/train/trainer.h"

namespace mt::cli {
namespace {

struct TrainArgs {
  tools::TrainConfig config;
  std::string device = "auto";  // parsed into config.device when the command runs
};

// What is trained, in which precision, where.
void add_model_options(CLI::App* cmd, TrainArgs& a) {
  tools::TrainConfig& c = a.config;
  add_model_option(cmd, c.model, "auto (" + auto_model_help() + ") | " + model_names_help(),
                   /*with_auto=*/true);
  add_choice_option(cmd, "--precision", c.precision.mode, tools::parse_precision_choice,
                    {"auto", "fp32", "fp16", "bf16", "fp8"},
                    "auto (bf16 on a CPU, fp16 on a GPU) | fp32 | fp16 (autocast + GradScaler) | bf16 (autocast) | "
                    "fp8 (bf16 autocast, Linear GEMMs in FP8: --fp8-recipe)");
  add_fp8_options(cmd, c.precision.fp8);
  cmd->add_flag("--master-weights", c.precision.master_weights,
                "f16/bf16 parameters with f32 master weights in the optimizer");
  add_device_option(cmd, a.device);
}

// How long, the optimizer and its schedule, the step's options.
void add_optimization_options(CLI::App* cmd, tools::TrainConfig& c) {
  add_integer_option(cmd, "--epochs", c.epochs, "epochs", 1);
  add_integer_option(cmd, "--steps", c.max_steps, "stop after N optimizer steps", 0);
  add_integer_option(cmd, "--batch", c.batch, "batch size", 1);
  tools::OptimOptions& o = c.optim;
  cmd->add_option("--lr", o.lr, "peak learning rate")->check(positive_number());
  add_choice_option(cmd, "--optimizer", o.optimizer, tools::parse_optimizer, {"adamw", "sgd"}, "adamw | sgd");
  add_choice_option(cmd, "--optimizer-state", o.state, optim::parse_state_dtype, {"f32", "bf16", "int8"},
                    "how the optimizer's moments are stored: f32 (4 bytes each) | bf16 (2, stochastic rounding) | "
                    "int8 (1, block-wise with one f32 absmax per block; tensors under 4096 values stay f32). "
                    "Embeddings keep f32 state");
  add_integer_option(cmd, "--optimizer-state-block", o.state_block,
                     "--optimizer-state int8: values per absmax (a power of two from 64 to 4096)", 64, 4096);
  cmd->add_option("--weight-decay", o.weight_decay, "weight decay (not on biases and norms)")
      ->check(non_negative_number());
  add_choice_option(cmd, "--schedule", o.schedule, tools::parse_schedule, {"cosine", "constant", "step"},
                    "cosine | constant | step");
  add_integer_option(cmd, "--warmup", o.warmup, "linear warmup steps", 0);
  add_integer_option(cmd, "--grad-accum", o.grad_accum, "micro-batches per optimizer step", 1);
  cmd->add_flag("--cuda-graph", c.cuda_graph,
                "capture the whole training step in a CUDA graph once and replay it (cuda or sim device)");
  cmd->add_option("--clip", o.clip, "max gradient norm (0 = off)")->check(non_negative_number());
  cmd->add_option("--init-scale", c.precision.init_scale, "fp16: the GradScaler's first loss scale (default 65536)")
      ->check(positive_number());
  add_seed_option(cmd, c.seed, "random seed (0 to 2^64 - 1)");
}

// Checkpoints, metrics and reports.
void add_output_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_option("--save", c.checkpoint.save, "checkpoint (.safetensors) written each epoch and at the end");
  cmd->add_option("--resume", c.checkpoint.resume, "continue from a checkpoint")->check(CLI::ExistingFile);
  cmd->add_flag("--save-sharded", c.checkpoint.sharded,
                "with --shard: each rank writes its own shards beside an index at --save (nothing gathered; "
                "resumed by the same number of ranks with --shard)");
  cmd->add_option("--log", c.report.log, "metrics as JSON lines");
  cmd->add_option("--report", c.report.html,
                  "write this run's HTML report here at the end (loss, loss scale, gradient norm, throughput, memory "
                  "ledger; one self-contained file)");
  cmd->add_option("--tensorboard", c.report.tensorboard,
                  "write TensorBoard event files into this folder (loss, lr, loss scale, gradient norm, samples/s, "
                  "memory by category)");
}

// The data: which, where, its windows, augmentation and limits; when to evaluate.
void add_data_options(CLI::App* cmd, tools::TrainConfig& c) {
  tools::DataOptions& d = c.data;
  cmd->add_option("--data", d.dir,
                  "the dataset's directory (default: $MT_FASHION_MNIST or the Debian package's for Fashion-MNIST, "
                  "$MT_BROWN_DIR or the cache folder tools/scripts/setup.sh fills for Brown)");
  add_dataset_option(cmd, d.dataset, "auto (the model's kind) | " + dataset_names_help());
  add_integer_option(cmd, "--context", d.context,
                     "text models: tokens per window or passage (default: the model's context)", 0);
  add_tokenizer_option(cmd, d.tokenizer,
                       "the brown dataset's tokens: bytes (256) or gpt2 (GPT-2's BPE, 50257; the model's vocabulary "
                       "grows to it)");
  add_integer_option(cmd, "--eval-every", c.report.eval_every,
                     "also evaluate every N optimizer steps (default: each epoch's end)", 0);
  cmd->add_flag("--augment", d.augment, "random crop and horizontal flip");
  add_integer_option(cmd, "--train-limit", d.train_limit,
                     "use only the first N training samples (images or text windows)", 0);
  add_integer_option(cmd, "--test-limit", d.test_limit, "use only the first N held-out samples", 0);
}

// Memory savers, CPU threads and the memory ledger.
void add_memory_options(CLI::App* cmd, tools::TrainConfig& c) {
  cmd->add_flag(
      "--checkpoint-activations", c.memory.checkpoint_activations,
      "recompute each block (transformers) or stage (cnn, resnet) in backward instead of keeping its activations");
  cmd->add_flag("--offload-optimizer", c.optim.offload,
                "keep master weights and optimizer state in host memory, streamed to the device for each update");
  add_integer_option(cmd, "--threads", c.parallel.threads,
                     "CPU threads for the kernels (default 0 = auto: timed trials of 1, 2, 4, ... threads up to "
                     "$MT_NUM_THREADS or the cores keep the fastest, and are repeated every few seconds)",
                     0, 4096);
  cmd->add_flag("--memory", c.report.memory,
                "print the memory ledger at the training peak (parameters, gradients, optimizer state, activations, "
                "...) beside its theory");
}

std::optional<DType> parse_param_dtype(const std::string& text) { return tools::parse_float_dtype(text); }

// The data-parallel modes (mpirun -np N).
void add_parallel_options(CLI::App* cmd, tools::ParallelOptions& p) {
  cmd->add_flag("--shard-optimizer", p.shard_optimizer,
                "ZeRO stage 1 (with mpirun -np N): each rank keeps 1/N of the optimizer state and master weights");
  add_choice_option(cmd, "--shard", p.shard, tools::parse_shard_level, {"none", "grads", "params"},
                    "fully sharded data parallel (with mpirun -np N): grads = ZeRO-2 (gradients and optimizer state "
                    "split over the ranks), params = ZeRO-3 (the parameters too, all-gathered per block or stage "
                    "when needed); f32 master weights either way");
  add_choice_option(cmd, "--param-dtype", p.param_dtype, parse_param_dtype, {"f32", "bf16", "f16"},
                    "--shard: the dtype the gathered parameters compute in (default: the model's)");
  add_choice_option(cmd, "--reduce-dtype", p.reduce_dtype, tools::parse_float_dtype, {"f32", "bf16", "f16"},
                    "--shard: the dtype gradients are reduce-scattered in (default f32)");
  cmd->add_flag("--ddp", p.ddp,
                "train through DistributedDataParallel even as one process (mpirun -np N > 1 always does); with "
                "MT_DIST_BACKEND=nccl it runs the NCCL path on one GPU");
  cmd->add_flag("--sync-bn", p.sync_bn,
                "with mpirun -np N: BatchNorm layers (cnn, resnet) normalise with every rank's batch statistics "
                "(SyncBatchNorm), combined in f32");
  cmd->add_flag("--drop-uneven", p.drop_uneven,
                "with mpirun -np N: leave out the last training samples of each epoch that do not split evenly "
                "over the ranks (default: pad the last shards by repeating samples from the epoch's start, as "
                "PyTorch's DistributedSampler)");
}

}  // namespace

Subcommand add_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  tools::TrainConfig& config = args->config;
  CLI::App* cmd = app.add_subcommand("train", "Train a reference model (Fashion-MNIST images or Brown text)");
  add_model_options(cmd, *args);
  add_optimization_options(cmd, config);
  add_output_options(cmd, config);
  add_data_options(cmd, config);
  add_memory_options(cmd, config);
  add_parallel_options(cmd, config.parallel);
  cmd->add_flag("!--no-progress", config.report.progress, "no live progress line");
  add_diagnostic_options(cmd, config.debug);
  auto run = [args](const std::string& command_line) {
    args->config.device = tools::parse_device_choice(args->device);
    args->config.report.command = command_line;
    tools::train(args->config);
    print_profile();
    return 0;
  };
  return {cmd, run, /*distributed=*/true};
}

}  // namespace mt::cli
