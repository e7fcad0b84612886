#include "tools/train/run.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "core/allocator.h"
#if MT_WITH_CUDA
#include "core/device_info.h"
#endif
#include "distributed/process_group.h"
#include "distributed/sync_batch_norm.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "tools/train/kernel_verification.h"
#include "tools/train/output_paths.h"

namespace mt::tools {

namespace {

// Every nn::Embedding's weight in the model (a tied output head included).
std::vector<Tensor> embedding_weights(const nn::Module& module) {
  std::vector<Tensor> out;
  if (const auto* embedding = dynamic_cast<const nn::Embedding*>(&module)) out.push_back(embedding->weight);
  for (const auto& [name, child] : module.children()) {
    for (const Tensor& w : embedding_weights(*child)) out.push_back(w);
  }
  return out;
}

// ---------------------------------------------------------------- the optimizer and its schedule

// Weight decay on weight matrices and kernels only: biases and norm
// parameters (1-D) get none, the usual recipe.
std::vector<optim::ParamGroup> param_groups(const nn::Module& model, double lr, double weight_decay) {
  optim::ParamGroup decayed{{}, lr, weight_decay}, plain{{}, lr, 0.0};
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decayed : plain).params.push_back(p);
  std::vector<optim::ParamGroup> groups;
  if (!decayed.params.empty()) groups.push_back(decayed);
  if (!plain.params.empty()) groups.push_back(plain);
  return groups;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimOptions& o, std::vector<optim::ParamGroup> groups,
                                                 const optim::PrecisionOptions& precision) {
  switch (o.optimizer) {
    case OptimizerKind::AdamW:
      return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = o.lr}, precision);
    case OptimizerKind::Sgd:
      return std::make_unique<optim::SGD>(groups, optim::SgdOptions{.lr = o.lr, .momentum = o.momentum}, precision);
  }
  fail("unknown optimizer {}", static_cast<int>(o.optimizer));
}

std::unique_ptr<optim::LrScheduler> make_scheduler(const OptimOptions& o, optim::Optimizer& opt, int64_t total) {
  switch (o.schedule) {
    case ScheduleKind::Cosine: return std::make_unique<optim::WarmupCosineLr>(opt, std::min(o.warmup, total), total);
    case ScheduleKind::Constant: return std::make_unique<optim::ConstantLr>(opt, o.warmup);
    case ScheduleKind::Step:
      return std::make_unique<optim::StepLr>(opt, std::max<int64_t>(total / 3, 1), 0.1, o.warmup);
  }
  fail("unknown schedule {}", static_cast<int>(o.schedule));
}

int visible_gpus() {
#if MT_WITH_CUDA
  return std::max(1, cuda::query_devices().count);
#else
  return 1;
#endif
}

}  // namespace

// Per-element state tensors the optimizer keeps per parameter (the memory theory).
OptimizerStateTheory optimizer_state_theory(const TrainingRun& r) {
  const OptimOptions& o = r.c.optim;
  const int tensors = o.optimizer == OptimizerKind::AdamW ? 2 : o.momentum > 0 ? 1 : 0;
  const optim::PrecisionOptions defaults;
  return {.tensors = tensors,
          .dtype = o.state,
          .block = o.state_block,
          .min_quantized_numel = defaults.min_quantized_numel,
          .kept_f32 = embedding_weights(*r.model)};
}

std::string shard_layout_name(const dist::FullyShardedDataParallel& fsdp) {
  std::string name;
  for (const int64_t elements : fsdp.unit_shard_elements()) {
    if (!name.empty()) name += ',';
    name += std::to_string(elements);
  }
  return name;
}

// Work that is not a step (evaluation, checkpoints) has happened: neither the
// step times nor the thread tuner count it.
void restart_step_clock(TrainingRun& r) {
  r.last_step_end = Clock::now();
  if (r.tuner) r.tuner->pause();
}

// Keeps the ledger if this stretch of training peaked higher than any before;
// called before evaluating or saving, whose memory is not a training step's.
void note_training_memory(TrainingRun& r) {
  const MemoryLedger now = memory_ledger(r.device);
  if (now.total_peak >= r.training_memory.total_peak) r.training_memory = now;
}

RunThreads::RunThreads(TrainingRun& r) : previous_(num_threads()) {
  const int64_t threads = r.c.parallel.threads;
  MT_CHECK(threads >= 0 && threads <= 4096, "train: --threads must be 0 (auto) to 4096, got {}", threads);
  if (threads > 0) {
    set_num_threads(static_cast<int>(threads));
  } else if (r.device.type == DeviceType::CPU) {
    r.tuner = std::make_unique<ThreadTuner>();
  }
}

// ---------------------------------------------------------------- building a run, step by step

namespace {

// Where this process trains: its rank, the world, its device (one GPU per
// rank, by its rank on the machine), and the configuration resolved for it.
void place_run(TrainingRun& r, const TrainConfig& requested) {
  r.rank = dist::world().rank();
  r.world = dist::world().size();
  r.device = resolve_device(requested.device);
  // One GPU per rank, by its rank on the machine.
  if (r.world > 1 && r.device.is_cuda() && !requested.device.index_named)
    r.device = Device{DeviceType::CUDA, dist::local_rank() % visible_gpus()};
  // Nothing has made a CUDA context yet (resolving the device only counts
  // them): the own kernels' checks run now, each in a fresh child process.
  verify_missing_families(r.device);
  r.c = resolve_defaults(requested, r.device);
  if (!r.c.report.html.empty()) r.c.report.record_grad_norm = true;  // the page plots the gradient norm
  r.precision = *r.c.precision.mode;
}

// The files the run writes (--save-sharded's own file too): not one of its
// inputs (but --save may continue --resume's checkpoint in place) nor one
// another, not a device, and in a folder that exists.
void check_train_outputs(const TrainConfig& c) {
  std::vector<OutputPath> outputs{{"--save", c.checkpoint.save, OutputKind::File, /*may_replace=*/"--resume"},
                                  {"--log", c.report.log},
                                  {"--report", c.report.html},
                                  {"--tensorboard", c.report.tensorboard, OutputKind::Folder}};
  if (c.checkpoint.sharded && !c.checkpoint.save.empty()) {  // this rank's file beside the index
    const int rank = dist::world().rank(), world = dist::world().size();
    outputs.emplace_back("--save-sharded", sharded_checkpoint_file(c.checkpoint.save, rank, world));
  }
  check_output_paths("train", outputs, {{"--resume", c.checkpoint.resume}, {"--data", c.data.dir}});
  if (!c.checkpoint.save.empty()) check_output_folder("train: --save", c.checkpoint.save);
  if (!c.report.html.empty()) check_output_folder("train: --report", c.report.html);
}

// The numbers and output folders of the configuration, refused before anything is built.
void check_config(const TrainingRun& r) {
  const TrainConfig& c = r.c;
  const OptimOptions& o = c.optim;
  MT_CHECK(c.epochs > 0 && c.batch > 0 && o.grad_accum > 0, "train: epochs, batch and grad-accum must be positive");
  MT_CHECK(o.lr > 0 && std::isfinite(o.lr), "train: the learning rate must be positive, got {}", o.lr);
  MT_CHECK(o.clip >= 0 && std::isfinite(o.clip), "train: --clip must be a finite norm (0 = off), got {}", o.clip);
  MT_CHECK(c.precision.init_scale > 0 && c.precision.init_scale < 3.4e38,
           "train: --init-scale must be positive and finite in f32, got {}", c.precision.init_scale);
  MT_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "train: the weight decay must be finite and >= 0");
  // Checked before training, not when the first file is written.
  check_train_outputs(c);
  MT_CHECK(!c.precision.master_weights || r.precision == Precision::Fp16 || r.precision == Precision::Bf16,
           "train: --master-weights needs --precision fp16 or bf16");
  const Fp8Options& fp8 = c.precision.fp8;
  MT_CHECK(fp8.history >= 1 && fp8.history <= (int64_t{1} << 20), "train: --fp8-history must be from 1 to 2^20, got {}",
           fp8.history);
  MT_CHECK(fp8.margin >= 0 && fp8.margin <= 64, "train: --fp8-margin must be from 0 to 64, got {}", fp8.margin);
  MT_CHECK(fp8.stats_every == 0 || !c.cuda_graph,
           "train: --fp8-stats reads the statistics back every N steps and cannot run inside --cuda-graph's capture");
  MT_CHECK(fp8.shadow_every == 0 || !c.cuda_graph,
           "train: --fp8-shadow runs extra GEMMs every N steps and reads their errors back, which --cuda-graph's "
           "one captured step cannot do");
  for (const std::string& k : fp8.keep_bf16) {
    MT_CHECK(k == "first" || k == "last" || k == "head" || k == "none",
             "train: --fp8-keep-bf16 takes first, last, head or none, got '{}'", k);
  }

  MT_CHECK(c.report.eval_every >= 0, "train: --eval-every must not be negative");
}

// Both splits hold samples: said here, naming the dataset, before the
// loader (which would only count ranks) or the evaluation (0 of 0) meet them.
void check_not_empty(const DataOptions& d, const Splits& s) {
  const std::string where = d.dir.empty() ? "" : fmt::format(" in '{}'", d.dir);
  MT_CHECK(s.train.size() > 0, "train: the training set is empty: '{}'{} holds 0 training samples", d.dataset, where);
  MT_CHECK(s.test.size() > 0, "train: the held-out set is empty: '{}'{} holds 0 held-out samples", d.dataset, where);
}

// The model's description and the dataset's splits.
void build_data(TrainingRun& r) {
  r.model_info = models::model_info(r.c.model);
  r.splits = load_data(r.c, r.model_info);
  check_not_empty(r.c.data, r.splits);
  const bool language_model = r.model_info.task == models::ModelTask::LanguageModel;
  r.summary.language_model = language_model;
  if (models::reads_tokens(r.model_info.task)) r.tokens_per_sample = r.splits.train.inputs.size(1);
}

// --shard (fully sharded data parallel) and what it does not combine with yet.
void check_fully_sharded(const TrainingRun& r) {
  const TrainConfig& c = r.c;
  const ParallelOptions& p = c.parallel;
  if (p.shard == ShardLevel::None) {
    MT_CHECK(!c.checkpoint.sharded,
             "train: --save-sharded writes fully sharded data parallel's shards; add --shard grads or --shard params");
    MT_CHECK(!p.param_dtype && p.reduce_dtype == kF32,
             "train: --param-dtype and --reduce-dtype set fully sharded data parallel's policy; add --shard grads or "
             "--shard params");
    return;
  }
  MT_CHECK(!p.ddp && !p.shard_optimizer,
           "train: --shard {} is a way of data parallel training of its own; drop --ddp and --shard-optimizer "
           "(--shard grads shards the optimizer state too)",
           shard_level_name(p.shard));
  MT_CHECK(!c.precision.master_weights,
           "train: --shard keeps f32 shards of the parameters as the master weights; instead of --master-weights, "
           "--param-dtype bf16 or f16 makes the gathered parameters compute in 16 bits");
  MT_CHECK(!c.optim.offload, "train: --offload-optimizer is not supported with --shard yet");
  MT_CHECK(!c.checkpoint.sharded || !c.checkpoint.save.empty(),
           "train: --save-sharded needs --save (the index's path)");
  MT_CHECK(!c.cuda_graph, "train: --cuda-graph is not supported with --shard yet");
  MT_CHECK(r.precision != Precision::Fp8, "train: --precision fp8 is not supported with --shard yet");
}

// The model, seeded, on its device (f16/bf16 under --master-weights), and
// wrapped for DDP when the run is data parallel.
void build_model(TrainingRun& r) {
  const TrainConfig& c = r.c;
  manual_seed(c.seed);
  r.model = models::make_model(c.model, r.splits.train.classes);
  if (c.memory.checkpoint_activations && !r.model->enable_activation_checkpointing()) {
    std::vector<std::string> checkpointable;
    for (const models::ModelInfo& m : models::model_list()) {
      if (m.checkpointable) checkpointable.push_back(m.name);
    }
    fail("train: --checkpoint-activations applies to models with stages or blocks to recompute ({}), not {}",
         fmt::join(checkpointable, ", "), c.model);
  }
  r.model->to(r.device);
  if (c.precision.master_weights) r.model->to(low_precision_dtype(r.precision), /*keep_norms_fp32=*/true);
  const ParallelOptions& p = c.parallel;
  MT_CHECK(!c.cuda_graph || (r.world == 1 && !p.shard_optimizer && !p.ddp),
           "train: --cuda-graph is not supported with data parallel training (mpirun, --ddp) or --shard-optimizer yet");
  MT_CHECK(!(p.ddp && p.shard_optimizer),
           "train: --ddp and --shard-optimizer are two ways of data parallel training; choose one");
  check_fully_sharded(r);
  if (p.sync_bn) {
    MT_CHECK(dist::convert_sync_batchnorm(*r.model) > 0,
             "train: --sync-bn: {} has no BatchNorm layers (cnn and "
             "resnet have)",
             c.model);
    MT_CHECK(!c.cuda_graph, "train: --sync-bn is not supported with --cuda-graph yet");
  }
  // The gradients live in DDP's buckets: no copies in or out, and no second
  // copy of them in memory (the training loop keeps them only until the next step).
  if ((r.world > 1 || p.ddp) && !p.shard_optimizer && p.shard == ShardLevel::None) {
    r.ddp = std::make_unique<dist::DistributedDataParallel>(r.model, dist::DdpOptions{.gradient_as_bucket_view = true});
  }
}

// The loader (this rank's shard of each epoch), the stager that moves its
// batches to the device, the metrics' read-back ring, and the epoch's length.
void build_loader(TrainingRun& r) {
  const TrainConfig& c = r.c;
  // Batches reach the device through the stager's own pinned buffers.
  r.loader =
      std::make_unique<data::DataLoader>(r.splits.train, data::LoaderOptions{.batch = c.batch,
                                                                             .shuffle = true,
                                                                             .augment = c.data.augment,
                                                                             .seed = c.seed,
                                                                             .prefetch = c.data.prefetch,
                                                                             .shard_rank = r.rank,
                                                                             .shard_count = r.world,
                                                                             .drop_uneven = c.parallel.drop_uneven});
  r.stager = std::make_unique<BatchStager>(r.device, r.splits.train, c.batch);
  r.metrics = std::make_unique<StepMetrics>(r.device);
  r.batches = r.loader->batches_per_epoch();
  const int64_t accum = c.optim.grad_accum;
  MT_CHECK(r.batches >= accum,
           "train: --grad-accum {} needs {} batches per epoch, but {} samples make {} batches of {}: no optimizer step "
           "would run",
           accum, accum, r.splits.train.size(), r.batches, c.batch);
  r.steps_per_epoch = std::max<int64_t>(r.batches / accum, 1);
}

// The optimizer (or ZeRO-1's shard of it) and its schedule.
void build_optimizer(TrainingRun& r) {
  const TrainConfig& c = r.c;
  const OptimOptions& o = c.optim;
  // The schedule spans --epochs; --steps only stops the run early (so a run
  // stopped by --steps and resumed without it keeps the same schedule).
  const int64_t total_steps = c.epochs * r.steps_per_epoch;

  MT_CHECK(!o.offload || !r.device.is_cpu(),
           "train: --offload-optimizer moves optimizer state from the device to host memory; on the CPU it is "
           "there already (use --device sim or cuda)");
  MT_CHECK(!o.offload || !c.cuda_graph,
           "train: --offload-optimizer is not supported with --cuda-graph yet (its copies are not captured)");
  const optim::PrecisionOptions precision{.master_weights = c.precision.master_weights,
                                          .seed = c.seed,
                                          .offload_state = o.offload,
                                          .state_dtype = o.state,
                                          .state_block = o.state_block};
  const auto make = [&](std::vector<optim::ParamGroup> groups) {
    return make_optimizer(o, std::move(groups), precision);
  };
  // Embeddings keep f32 moments (bitsandbytes' "stable embedding" lesson:
  // their rows see rare, spiky gradients that low-precision moments handle
  // worst), sharded or not.
  const ParallelOptions& p = c.parallel;
  if (p.shard_optimizer) {
    r.zero = std::make_unique<dist::ShardedOptimizer>(param_groups(*r.model, o.lr, o.weight_decay), make);
    r.opt = &r.zero->shard();
    for (const Tensor& weight : embedding_weights(*r.model)) r.zero->keep_f32_state(weight);
  } else if (p.shard != ShardLevel::None) {
    r.fsdp = std::make_unique<dist::FullyShardedDataParallel>(
        r.model, param_groups(*r.model, o.lr, o.weight_decay), make,
        dist::FsdpOptions{.strategy = p.shard == ShardLevel::Params ? dist::ShardingStrategy::Full
                                                                    : dist::ShardingStrategy::GradsAndState,
                          .param_dtype = p.param_dtype,
                          .reduce_dtype = p.reduce_dtype});
    r.opt = &r.fsdp->shard();
    for (const Tensor& weight : embedding_weights(*r.model)) r.fsdp->keep_f32_state(weight);
  } else {
    r.owned_opt = make_optimizer(o, param_groups(*r.model, o.lr, o.weight_decay), precision);
    r.opt = r.owned_opt.get();
    for (const Tensor& weight : embedding_weights(*r.model)) r.opt->keep_f32_state(weight);
  }
  r.scheduler = make_scheduler(o, *r.opt, total_steps);
  // The schedule counts on the device, so a skipped f16 step holds it back
  // without the host reading the skip flag.
  r.scheduler->use_device_counter(r.device);
}

// The GradScaler: f16 needs loss scaling; bf16 keeps f32's exponent range
// and needs none.
void build_scaler(TrainingRun& r) {
  // The collapse warning comes from the trainer's asynchronous metrics instead
  // of the scaler's own periodic read.
  r.scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{
      .init_scale = r.c.precision.init_scale, .enabled = r.precision == Precision::Fp16, .collapse_check_interval = 0});
}

// The Linears --fp8-keep-bf16 names: the first and last in registration
// order, and heads (a Linear named classifier, head or lm_head).
// The Linears --fp8-keep-bf16 keeps (first, last, head), each with its reason.
std::vector<std::pair<const nn::Linear*, std::string>> linears_kept_in_bf16(const nn::Module& model,
                                                                            const std::vector<std::string>& keep) {
  std::vector<std::pair<std::string, const nn::Linear*>> all;
  const std::function<void(const nn::Module&)> walk = [&](const nn::Module& m) {
    for (const auto& [name, child] : m.children()) {
      if (const auto* linear = dynamic_cast<const nn::Linear*>(child.get())) all.emplace_back(name, linear);
      walk(*child);
    }
  };
  walk(model);
  std::vector<std::pair<const nn::Linear*, std::string>> kept;
  auto wants = [&](const char* what) { return std::find(keep.begin(), keep.end(), what) != keep.end(); };
  if (all.empty()) return kept;
  if (wants("first")) kept.emplace_back(all.front().second, "--fp8-keep-bf16 first: the first Linear stays in BF16");
  if (wants("last")) kept.emplace_back(all.back().second, "--fp8-keep-bf16 last: the last Linear stays in BF16");
  for (const auto& [name, linear] : all) {
    if (wants("head") && (name == "classifier" || name == "head" || name == "lm_head")) {
      kept.emplace_back(linear, "--fp8-keep-bf16 head: the output head stays in BF16");
    }
  }
  return kept;
}

// --precision fp8: the recipe's state, with the kept Linears opted out.
void build_fp8(TrainingRun& r) {
  if (r.precision != Precision::Fp8) return;
  const Fp8Options& o = r.c.precision.fp8;
  amp::Fp8Recipe recipe = amp::Fp8Recipe::current(static_cast<int>(o.margin));
  if (o.recipe == amp::Fp8RecipeKind::Delayed) {
    recipe = amp::Fp8Recipe::delayed_scaling({o.history, amp::AmaxAlgo::Max, static_cast<int>(o.margin)});
  }
  if (o.recipe == amp::Fp8RecipeKind::Block) recipe = amp::Fp8Recipe::block();
  r.fp8 = std::make_unique<amp::Fp8State>(recipe);
  r.fp8->collect_statistics(o.stats_every > 0);
  for (const auto& [linear, reason] : linears_kept_in_bf16(*r.model, o.keep_bf16)) {
    r.fp8->keep_high_precision(*linear, reason);
  }
}

// --resume: the model, optimizer, scaler and schedule as the checkpoint left them.
void resume_run(TrainingRun& r) {
  const LoadOptimizerState load_optimizer = [&](const optim::StateDict& state) {
    if (r.zero) {
      r.zero->load_consolidated_state_dict(state);
    } else if (r.fsdp) {
      r.fsdp->load_consolidated_state_dict(state);
    } else {
      r.opt->load_state_dict(state);
    }
  };
  if (r.fsdp && is_sharded_checkpoint(load_safetensors(r.c.checkpoint.resume))) {
    r.pos = load_sharded_checkpoint(
        r.c.checkpoint.resume, r.c, r.splits.train.size(), *r.model, shard_layout_name(*r.fsdp),
        [&](const LocalShards& mine) {
          r.fsdp->load_master_shard(mine.master);
          r.opt->load_state_dict(mine.optimizer);
        },
        *r.scaler, *r.scheduler, r.rank, r.world);
    return;
  }
  // Sharded parameters are whole while the model's state loads, then written back into the shards.
  std::optional<dist::FullyShardedDataParallel::FullParameters> whole;
  if (r.fsdp) whole.emplace(*r.fsdp, /*write_back=*/true);
  r.pos = load_checkpoint(r.c.checkpoint.resume, r.c, r.splits.train.size(), *r.model, load_optimizer, *r.scaler,
                          *r.scheduler, r.fp8.get());
  if (r.pos.saved_world != r.world && r.rank == 0) {
    spdlog::info("resume: the checkpoint was written by {} rank(s), this run has {}: epoch {} continues at sample {} "
                 "of {}, {} samples a step from here",
                 r.pos.saved_world, r.world, r.pos.epoch + 1, r.pos.sample_in_epoch, r.splits.train.size(),
                 r.world * r.c.batch * r.c.optim.grad_accum);
  }
}

// --explain-skips: the scaler flags each parameter whose gradient held an
// inf/NaN, and the run keeps the parameters' names to print them by.
void watch_nonfinite_gradients(TrainingRun& r) {
  const int64_t explain_skips = r.c.debug.explain_skips;
  MT_CHECK(explain_skips >= 0, "train: --explain-skips must be 0 (off) or a positive N, got {}", explain_skips);
  if (explain_skips == 0 || !r.scaler->is_enabled()) return;
  r.scaler->track_nonfinite_gradients(true);
  std::map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : r.model->named_parameters()) names[p.impl()] = name;
  for (const Tensor& p : r.opt->parameters()) {
    auto it = names.find(p.impl());
    r.nonfinite_names.push_back(it != names.end() ? it->second : fmt::format("a {} shard", p.shape_string()));
  }
}

// --cuda-graph: the graph the step is captured in (step.cpp).
void prepare_cuda_graph(TrainingRun& r) {
  MT_CHECK(!r.c.cuda_graph || !r.c.debug.detect_anomaly,
           "train: --detect-anomaly reads every op's result back on the host, which a CUDA graph cannot capture; "
           "drop --cuda-graph while debugging");
  if (!r.c.cuda_graph) return;
  MT_CHECK(!r.device.is_cpu(), "train: --cuda-graph needs --device cuda or sim (the CPU has no graphs)");
  r.graphed = std::make_unique<GraphedStep>();
  r.graphed->graph = std::make_unique<CudaGraph>(r.device);
}

}  // namespace

// Built in the order PyTorch's AMP recipe uses: data, model, loader,
// optimizer, schedule, scaler, checkpoint.
namespace {

// MT_TEST_NONFINITE_GRADIENT=rank:step (tests only): an inf in one rank's
// gradients at one step, to check that every rank skips that step together.
void read_fault_injection(TrainingRun& r) {
  const char* text = std::getenv("MT_TEST_NONFINITE_GRADIENT");
  if (text == nullptr) return;
  int rank = -1;
  long long step = -1;
  char extra = 0;
  MT_CHECK(std::sscanf(text, "%d:%lld%c", &rank, &step, &extra) == 2 && rank >= 0 && step >= 1,
           "MT_TEST_NONFINITE_GRADIENT must be rank:step (a rank and a step from 1), got '{}'", text);
  r.inject_rank = rank;
  r.inject_step = step;
}

}  // namespace

void setup_run(TrainingRun& r, const TrainConfig& requested) {
  read_fault_injection(r);
  place_run(r, requested);
  check_config(r);
  build_data(r);
  build_model(r);
  build_loader(r);
  build_optimizer(r);
  build_scaler(r);
  build_fp8(r);
  if (!r.c.checkpoint.resume.empty()) resume_run(r);
  const models::ParameterCounts counts = models::parameter_counts(*r.model);
  r.summary.parameters = counts.total;
  r.summary.activated_parameters = counts.activated;
  watch_nonfinite_gradients(r);
  prepare_cuda_graph(r);
}

}  // namespace mt::tools
