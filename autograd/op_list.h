// The op vocabulary of the tape: one row per differentiable op that computes.
//
//   X(Enum, "name", Policy, "what backward saves")
//
//   Enum     amp::Op::Enum, the id an op hands to autocast_inputs()
//   name     the tape node's name (and the dtype report's, the error messages')
//   Policy   its autocast CastPolicy (autograd/autocast.h says what each means)
//   saves    the tensors its backward closure keeps alive, read off the rule in
//            autograd/ops_*.cpp (each record() says the same beside it):
//            "input"/"output" are the op's own (as cast by its policy: f32 for
//            an Fp32 row, the compute dtype for a LowerPrecision row);
//            "nothing" means the closure holds only shapes, dtypes and
//            scalars; "nothing of its own" marks a composite whose nodes are
//            the ops it is made of. Text after "(" or ";" qualifies the list.
//
// This list generates enum class amp::Op and the policy table (with
// autocast_policy(), op_name(), saved_for_backward()) in autograd/autocast.
// Adding an op: one row here, its function in ops.h and the ops_<group>.cpp
// of its kind (ops_nn.cpp for row-wise ops and losses).
// Ops that compute nothing (views, reshapes, dtype and device moves) and the
// tape's own checkpoint node have no row here: they are MT_TAPE_OPS's rows
// (end of this file), recorded through record_node().
//
// The order is the policy table's (tests and the dtype report read it): keep
// rows grouped by policy and append within a group.
#pragma once

// clang-format off
#define MT_AUTOGRAD_OPS(X)                                                                                            \
  /* lower precision: matmul-like ops, where Tensor Cores give the speed */                                           \
  X(MatMul, "matmul", LowerPrecision, "nothing of its own: views around one bmm node (a, b)")                         \
  X(Bmm, "bmm", LowerPrecision, "a, b (compute dtype)")                                                               \
  X(Linear, "linear", LowerPrecision,                                                                                 \
    "input, weight (compute dtype); + output for a fused ReLU, pre-activation for a fused GELU")                      \
  X(Conv2d, "conv2d", LowerPrecision,                                                                                 \
    "input, weight (compute dtype; input only if weight needs grad, weight only if input does)")                      \
  X(ScaledDotProductAttention, "scaled_dot_product_attention", LowerPrecision,                                        \
    "q, k, v, output, lse (compute dtype; lse f32 per row; the masks given); reference path (f64, math): its nodes")  \
  /* the GEMMs; the loss inside is f32 (as softmax statistics are in attention) */                                    \
  X(LinearCrossEntropy, "linear_cross_entropy", LowerPrecision,                                                       \
    "hidden, weight, target, stats, count (compute dtype; f32 stats: max, lse per row; count: mean only)")            \
  /* fp32: range or accumulation needs f32 */                                                                         \
  X(Exp, "exp", Fp32, "output (f32)")                                                                                 \
  X(Log, "log", Fp32, "input (f32)")                                                                                  \
  X(Pow, "pow", Fp32, "a, b, output (f32); pow(x, scalar): input")                                                    \
  X(Reciprocal, "reciprocal", Fp32, "output (f32)")                                                                   \
  X(Rsqrt, "rsqrt", Fp32, "output (f32)")                                                                             \
  X(Softmax, "softmax", Fp32, "output (f32)")                                                                         \
  X(LogSoftmax, "log_softmax", Fp32, "output (f32)")                                                                  \
  X(LayerNorm, "layer_norm", Fp32, "input, weight, mean, rstd (f32; mean and rstd one per row)")                      \
  X(CrossEntropy, "cross_entropy", Fp32,                                                                              \
    "logits, target, stats, count (f32 logits; stats: max, lse per row; count: mean only)")                           \
  X(MseLoss, "mse_loss", Fp32, "nothing of its own: sub, square (the difference), sum or mean")                       \
  X(RmsNorm, "rms_norm", Fp32, "input, weight, rstd (f32; rstd one per row)")                                        \
  X(Sum, "sum", Fp32, "nothing (input shape only)")                                                                   \
  X(Mean, "mean", Fp32, "nothing (input shape and count only)")                                                       \
  X(Var, "var", Fp32, "input (f32)")                                                                                  \
  X(Cumsum, "cumsum", Fp32, "nothing (dim only)")                                                                     \
  X(RouterLogits, "router_logits", Fp32, "nothing of its own: linear's input, weight (f32)")                          \
  /* promote: mixed inputs go to the widest input type */                                                             \
  X(Add, "add", Promote, "nothing")                                                                                   \
  X(Sub, "sub", Promote, "nothing")                                                                                   \
  X(Rsub, "rsub", Promote, "nothing")                                                                                 \
  X(Mul, "mul", Promote, "a, b (each only if the other needs grad); mul(x, scalar): nothing")                         \
  X(Div, "div", Promote, "b, output (output only if b needs grad); div(x, scalar): nothing")                          \
  X(Where, "where", Promote, "condition (bool)")                                                                      \
  X(Cat, "cat", Promote, "nothing (split lengths only)")                                                              \
  X(Maximum, "maximum", Promote, "a, b")                                                                              \
  X(Minimum, "minimum", Promote, "a, b")                                                                              \
  X(IndexAdd, "index_add", Promote, "index")                                                                          \
  X(Swiglu, "swiglu", Promote, "gate, up")                                                                            \
  /* the input's dtype (batch_norm: f32 statistics inside) */                                                         \
  X(BatchNorm, "batch_norm", InputDType, "input, weight, mean, invstd (f32 mean, invstd per channel)")                \
  X(Neg, "neg", InputDType, "nothing")                                                                                \
  X(Sqrt, "sqrt", InputDType, "output")                                                                               \
  X(Abs, "abs", InputDType, "input")                                                                                  \
  X(Sign, "sign", InputDType, "nothing")                                                                              \
  X(Square, "square", InputDType, "input")                                                                            \
  X(Relu, "relu", InputDType, "output")                                                                               \
  X(Silu, "silu", InputDType, "input")                                                                                \
  X(Tanh, "tanh", InputDType, "output")                                                                               \
  X(Sigmoid, "sigmoid", InputDType, "output")                                                                         \
  X(Gelu, "gelu", InputDType, "input")                                                                                \
  X(Clamp, "clamp", InputDType, "input")                                                                              \
  X(Sin, "sin", InputDType, "input")                                                                                  \
  X(Cos, "cos", InputDType, "input")                                                                                  \
  X(Max, "max", InputDType, "indices (i64) for max(x, dim); max(x): input, output")                                   \
  X(Min, "min", InputDType, "indices (i64) for min(x, dim); min(x): input, output")                                   \
  X(MaxPool2d, "max_pool2d", InputDType, "indices (i64)")                                                             \
  X(AvgPool2d, "avg_pool2d", InputDType, "nothing (window and input shape only)")                                     \
  X(AdaptiveAvgPool2d, "adaptive_avg_pool2d", InputDType, "nothing (input shape only)")                               \
  X(Dropout, "dropout", InputDType, "mask (u8)")                                                                      \
  X(IndexSelect, "index_select", InputDType, "index")                                                                 \
  X(Gather, "gather", InputDType, "index")                                                                            \
  X(Rope, "rope", InputDType, "cos, sin (the tables' rows, f32)")                                                     \
  X(SyncBatchNorm, "sync_batch_norm", InputDType,                                                                    \
    "input, weight, mean, invstd, count (f32 mean, invstd per channel, count over the ranks; the all-reduce)")        \
  /* FP8 (autograd/fp8.h): x as given (bf16 under autocast), W as its f32 master */                                    \
  X(Fp8Linear, "fp8_linear", InputDType,                                                                              \
    "input, weight (FP8 + f32 scales, one byte per element; the input along M, as the weight gradient reads it)")
// clang-format on

// The nodes the tape records without a policy row (there is no dtype to
// decide): X("name", moves_only), moves_only when the node only moves or
// reinterprets values and so cannot make a NaN or inf (anomaly mode skips
// those; "to" casts, which can overflow f16). A node named in neither list
// is a user's op recording itself (autograd/function.h).
// clang-format off
#define MT_TAPE_OPS(X)                                                                             \
  X("view", true) X("permute", true) X("slice", true) X("expand", true) X("squeeze", true)          \
  X("unsqueeze", true) X("clone", true) X("to_device", true) X("to", false) X("checkpoint", false)
// clang-format on
