#!/usr/bin/python3
"""The PyTorch half of the parity suite: recomputes every record that
parity_dump wrote (inputs, op, arguments) in PyTorch and compares outputs and
input gradients with mixtape's.

    check_parity.py records.jsonl

Exit status: 0 when every record matches or is an accepted difference (listed
below with its reason), 1 otherwise, 77 (CTest's skip) when PyTorch cannot be
imported.

Tolerances are in units of the dtype's epsilon (2^-52, 2^-23, 2^-10, 2^-7):
  - elementwise ops: |got - want| <= ULPS * eps * |want| (+ the smallest
    normal, for results that underflow differently);
  - ops that accumulate (reductions, matmul, norms, losses, convolution,
    pooling): the bound is relative to the largest magnitude in the tensor,
    since the order of a sum decides its rounding.
NaN positions must match exactly and infinities must match in sign. Where
PyTorch 1.13 has no CPU kernel for f16/bf16, the reference is PyTorch in f32
rounded once to the low-precision dtype: what mixtape computes.
"""
import json
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"check_parity: SKIPPED, PyTorch is not importable ({e}); install Debian's python3-torch")
    sys.exit(77)

torch.set_num_threads(1)

DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "i64": torch.int64, "i32": torch.int32, "u8": torch.uint8, "bool": torch.bool}
EPS = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
TINY = {torch.float64: 2.2e-308, torch.float32: 1.18e-38, torch.float16: 6.1e-5, torch.bfloat16: 1.18e-38}

# Differences kept on purpose, by (op, what): each op's header says so too.
ACCEPTED = {
    ("cross_entropy", "dtype"): "mixtape's cross_entropy returns f32 for f16/bf16 logits (autograd/ops.h): "
                                "the loss is a statistic, rounding it to bf16 costs 3 digits for nothing",
    ("linear_cross_entropy", "dtype"): "as cross_entropy: the fused head's loss is f32 for f16/bf16 inputs",
}


def decode(v):
    if isinstance(v, str):
        return float(v)  # "nan", "inf", "-inf"
    return float(v)


def tensor_of(encoded, grad=False):
    dtype = DTYPES[encoded["dtype"]]
    values = [decode(v) for v in encoded["values"]]
    t = torch.tensor(values, dtype=torch.float64).reshape(encoded["shape"]).to(dtype)
    if grad:
        t.requires_grad_()
    return t


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def reduction(args):
    return args["reduction"]


def rope_op(x, cos, sin):  # HF Llama's: x * cos + rotate_half(x) * sin
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin


def linear_op(x, a):
    y = F.linear(*x)
    act = a["activation"]
    if act == "relu":
        return F.relu(y)
    if act == "gelu":
        return F.gelu(y)
    if act == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    return y


def sdpa_op(x, a):
    """PyTorch 2's F.scaled_dot_product_attention, as its documentation defines it."""
    q, k, v = x[0], x[1], x[2]
    scale = a.get("scale", 1 / math.sqrt(q.shape[-1]))
    s = (q * scale) @ k.transpose(-2, -1)
    if a.get("is_causal"):
        s = s.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    if a.get("mask") == "bool":
        s = s.masked_fill(~x[3], float("-inf"))
    if a.get("mask") == "float":
        s = s + x[3]
    if a.get("padding"):
        s = s.masked_fill(x[3][:, None, None, :], float("-inf"))
    return torch.softmax(s, -1) @ v


def multihead_attention_op(x, a):
    """nn.MultiheadAttention's forward (batch_first=False, need_weights=False) with the record's weights."""
    q, k, v, w, b, out_w, out_b = x[:7]
    padding = x[7] if a.get("padding") else None
    mask = x[7] if a.get("mask") else None
    out, _ = F.multi_head_attention_forward(q, k, v, q.shape[-1], 2, w, b, None, None, False, 0.0, out_w, out_b,
                                            training=False, key_padding_mask=padding, need_weights=False,
                                            attn_mask=mask)
    return out


def batch_norm_op(x, a):
    # mixtape takes f32 weight and running statistics with any input dtype
    # (as PyTorch's CUDA kernels do; its CPU kernel wants one dtype), computing
    # in f32 (f64 for f64 input): the twin does the same.
    compute = torch.float64 if x[0].dtype == torch.float64 else torch.float32
    mean, var = x[1].detach().to(compute), x[2].detach().to(compute)
    y = F.batch_norm(x[0].to(compute), mean, var, x[3].to(compute), x[4].to(compute), a["training"],
                     a["momentum"], a["eps"])
    y = y.to(x[0].dtype)
    return [y, mean.to(x[1].dtype), var.to(x[2].dtype)] if a["training"] else [y]


# op name -> (function(inputs, args) -> list of outputs, accumulates?)
OPS = {
    "neg": (lambda x, a: [torch.neg(x[0])], False),
    "exp": (lambda x, a: [torch.exp(x[0])], False),
    "log": (lambda x, a: [torch.log(x[0])], False),
    "sqrt": (lambda x, a: [torch.sqrt(x[0])], False),
    "rsqrt": (lambda x, a: [torch.rsqrt(x[0])], False),
    "abs": (lambda x, a: [torch.abs(x[0])], False),
    "sign": (lambda x, a: [torch.sign(x[0])], False),
    "reciprocal": (lambda x, a: [torch.reciprocal(x[0])], False),
    "square": (lambda x, a: [torch.square(x[0])], False),
    "relu": (lambda x, a: [torch.relu(x[0])], False),
    "gelu": (lambda x, a: [F.gelu(x[0])], False),
    "gelu_tanh": (lambda x, a: [F.gelu(x[0], approximate="tanh")], False),
    "silu": (lambda x, a: [F.silu(x[0])], False),
    "tanh": (lambda x, a: [torch.tanh(x[0])], False),
    "sigmoid": (lambda x, a: [torch.sigmoid(x[0])], False),
    "clamp": (lambda x, a: [torch.clamp(x[0], a["min"], a["max"])], False),
    "clamp_min": (lambda x, a: [torch.clamp(x[0], min=a["min"])], False),
    "pow_scalar": (lambda x, a: [torch.pow(x[0], a["exponent"])], False),
    "pow_scalar_neg": (lambda x, a: [torch.pow(x[0], a["exponent"])], False),
    "add_scalar": (lambda x, a: [x[0] + a["other"]], False),
    "sub_scalar": (lambda x, a: [x[0] - a["other"]], False),
    "mul_scalar": (lambda x, a: [x[0] * a["other"]], False),
    "div_scalar": (lambda x, a: [x[0] / a["other"]], False),
    "rsub_scalar": (lambda x, a: [a["other"] - x[0]], False),
    "add": (lambda x, a: [x[0] + x[1]], False),
    "sub": (lambda x, a: [x[0] - x[1]], False),
    "mul": (lambda x, a: [x[0] * x[1]], False),
    "div": (lambda x, a: [x[0] / x[1]], False),
    "pow": (lambda x, a: [torch.pow(torch.abs(x[0]), x[1])], False),
    "maximum": (lambda x, a: [torch.maximum(x[0], x[1])], False),
    "minimum": (lambda x, a: [torch.minimum(x[0], x[1])], False),
    "eq": (lambda x, a: [torch.eq(x[0], x[1])], False),
    "ne": (lambda x, a: [torch.ne(x[0], x[1])], False),
    "lt": (lambda x, a: [torch.lt(x[0], x[1])], False),
    "le": (lambda x, a: [torch.le(x[0], x[1])], False),
    "gt": (lambda x, a: [torch.gt(x[0], x[1])], False),
    "ge": (lambda x, a: [torch.ge(x[0], x[1])], False),
    "where": (lambda x, a: [torch.where(x[0], x[1], x[2])], False),
    "masked_fill": (lambda x, a: [x[0].masked_fill(x[1], a["value"])], False),
    "logical_and": (lambda x, a: [torch.logical_and(x[0], x[1])], False),
    "sum": (lambda x, a: [torch.sum(x[0], a["dim"], a["keepdim"]) if "dim" in a else torch.sum(x[0])], True),
    "mean": (lambda x, a: [torch.mean(x[0], a["dim"], a["keepdim"]) if "dim" in a else torch.mean(x[0])], True),
    "var": (lambda x, a: [torch.var(x[0], a["dim"], correction=a["correction"], keepdim=a["keepdim"])
                          if "dim" in a else torch.var(x[0])], True),
    "max_all": (lambda x, a: [torch.max(x[0])], True),
    "min_all": (lambda x, a: [torch.min(x[0])], True),
    "max_dim": (lambda x, a: list(torch.max(x[0], a["dim"], a["keepdim"])), True),
    "min_dim": (lambda x, a: list(torch.min(x[0], a["dim"], a["keepdim"])), True),
    "argmax": (lambda x, a: [torch.argmax(x[0], a["dim"], a["keepdim"]) if "dim" in a else torch.argmax(x[0])],
               True),
    "sum_to_size": (lambda x, a: [x[0].sum_to_size(a["size"])], True),
    "matmul": (lambda x, a: [torch.matmul(x[0], x[1])], True),
    "bmm": (lambda x, a: [torch.bmm(x[0], x[1])], True),
    "linear": (lambda x, a: [linear_op(x, a)], True),
    "softmax": (lambda x, a: [torch.softmax(x[0], a["dim"])], True),
    "log_softmax": (lambda x, a: [torch.log_softmax(x[0], a["dim"])], True),
    "layer_norm": (lambda x, a: [F.layer_norm(x[0], a["normalized_shape"], *(x[1:3] if len(x) > 1 else ()),
                                              eps=a["eps"])], True),
    "cross_entropy": (lambda x, a: [F.cross_entropy(x[0], x[1], ignore_index=a["ignore_index"],
                                                    reduction=reduction(a), label_smoothing=a["label_smoothing"])],
                      True),
    "linear_cross_entropy": (lambda x, a: [F.cross_entropy(F.linear(x[0], x[1]), x[2], ignore_index=a["ignore_index"],
                                                           reduction=reduction(a),
                                                           label_smoothing=a["label_smoothing"])], True),
    "mse_loss": (lambda x, a: [F.mse_loss(x[0], x[1], reduction=reduction(a))], True),
    "embedding": (lambda x, a: [F.embedding(x[1], x[0])], True),
    "cat": (lambda x, a: [torch.cat(x, a["dim"])], False),
    "stack": (lambda x, a: [torch.stack(x, a["dim"])], False),
    "split": (lambda x, a: list(torch.split(x[0], a["split_size"], a["dim"])), False),
    "index_select": (lambda x, a: [torch.index_select(x[0], a["dim"], x[1])], True),
    "gather": (lambda x, a: [torch.gather(x[0], a["dim"], x[1])], True),
    "index_add": (lambda x, a: [torch.index_add(x[0], a["dim"], x[1], x[2])], True),
    "router_logits": (lambda x, a: [F.linear(x[0], x[1])], True),
    "rope": (lambda x, a: [rope_op(x[0], x[1].to(x[0].dtype), x[2].to(x[0].dtype))], True),
    "swiglu": (lambda x, a: [F.silu(x[0]) * x[1]], True),
    "views": (lambda x, a: [x[0].permute(2, 0, 1)[:, :, 0:3:2].unsqueeze(1).expand(2, 3, 2, 2).contiguous()], False),
    "views2": (lambda x, a: [x[0].t().reshape(2, 6).select(1, 4).squeeze()], False),
    "conv2d": (lambda x, a: [F.conv2d(x[0], x[1], x[2], pair(a["stride"]), pair(a["padding"]), pair(a["dilation"]),
                                      a["groups"])], True),
    "max_pool2d": (lambda x, a: [F.max_pool2d(x[0], pair(a["kernel"]), pair(a["stride"]), pair(a["padding"]))],
                   False),
    "avg_pool2d": (lambda x, a: [F.avg_pool2d(x[0], pair(a["kernel"]), pair(a["stride"]), pair(a["padding"]),
                                              count_include_pad=a["count_include_pad"])], True),
    "adaptive_avg_pool2d": (lambda x, a: [F.adaptive_avg_pool2d(x[0], pair(a["output_size"]))], True),
    "batch_norm": (batch_norm_op, True),
    "sync_batch_norm": (batch_norm_op, True),  # a world of one: batch_norm over the local batch
    "dropout_eval": (lambda x, a: [F.dropout(x[0], a["p"], training=False)], False),
    "copy_": (lambda x, a: [x[0].copy_(x[1])], False),
    "sdpa": (lambda x, a: [sdpa_op(x, a)], True),
    "fill_": (lambda x, a: [x[0].fill_(a["value"])], False),
    "sin": (lambda x, a: [torch.sin(x[0])], False),
    "cos": (lambda x, a: [torch.cos(x[0])], False),
    "cumsum": (lambda x, a: [torch.cumsum(x[0], a["dim"])], True),
    "outer": (lambda x, a: [torch.outer(x[0], x[1])], False),
    "topk": (lambda x, a: list(torch.topk(x[0], a["k"], a["dim"], a["largest"])), False),
    "sort": (lambda x, a: list(torch.sort(x[0], dim=a["dim"], descending=a["descending"], stable=True)), False),
    # torch.argsort has no `stable` in 1.13: sort's stable indices are its answer.
    "multihead_attention": (lambda x, a: [multihead_attention_op(x, a)], True),
    "rms_norm": (lambda x, a: [x[0] * torch.rsqrt(x[0].pow(2).mean(-1, keepdim=True) + a["eps"]) * x[1]], True),
    "multinomial_certain": (lambda x, a: [torch.multinomial(x[0], 1)], False),
    "argsort": (lambda x, a: [torch.sort(x[0], dim=a["dim"], descending=a["descending"], stable=True).indices],
                False),
}

# Each public function of autograd/ops.h and the record ops that test it;
# check_coverage() fails the suite when ops.h gains a function not listed here.
COVERS = {
    "max": ["max_all", "max_dim"], "min": ["min_all", "min_dim"], "pow": ["pow", "pow_scalar", "pow_scalar_neg"],
    "add": ["add", "add_scalar"], "sub": ["sub", "sub_scalar"], "mul": ["mul", "mul_scalar"],
    "div": ["div", "div_scalar"], "rsub": ["rsub_scalar"], "clamp": ["clamp", "clamp_min"],
    "gelu": ["gelu", "gelu_tanh"], "multinomial": ["multinomial_certain"], "dropout": ["dropout_eval"], "scaled_dot_product_attention": ["sdpa"],
}
NOT_COMPARED = {
    "dropout": "training-mode masks come from mixtape's Philox stream, not PyTorch's generator; only eval mode "
               "is compared (mask statistics: tests/autograd/test_ops_nn.cpp)",
    "multinomial": "draws come from mixtape's Philox stream, not PyTorch's generator; the distribution is tested "
                   "instead (tests/autograd/test_ops_sort.cpp: frequencies against the weights, chi-square)",
}


def check_coverage(ops_header, record_ops):
    """The functions of autograd/ops.h that no record tests."""
    import re
    with open(ops_header) as f:
        names = set(re.findall(r"^(?:Tensor|ValuesIndices|std::vector<Tensor>|void) ([a-z_0-9]+)\(", f.read(), re.M))
    return sorted(n for n in names if not any(op in record_ops for op in COVERS.get(n, [n])))

LOW = (torch.float16, torch.bfloat16)

# Exact (50-digit) forms of the elementwise ops whose f64 PyTorch kernels
# cancel (1 + erf(x) for negative x): the oracle for f64 records where
# mixtape and PyTorch differ. op -> (f(x), f'(x)) on mpmath numbers.
try:
    import mpmath
    mpmath.mp.dps = 50
    _c = mpmath.sqrt(2 / mpmath.pi)

    def _gelu_tanh(x):
        return x / (1 + mpmath.exp(-2 * _c * (x + mpmath.mpf("0.044715") * x ** 3)))

    EXACT = {
        "gelu": (lambda x: x * mpmath.ncdf(x), lambda x: mpmath.ncdf(x) + x * mpmath.npdf(x)),
        "gelu_tanh": (_gelu_tanh, lambda x: mpmath.diff(_gelu_tanh, x)),
    }
except ImportError:  # pragma: no cover
    EXACT = {}


def exact_elementwise(record):
    """(outputs, grads) of an EXACT op in f64, from the 50-digit forms."""
    f, df = EXACT[record["op"]]
    x = [decode(v) for v in record["inputs"][0]["values"]]
    shape = record["inputs"][0]["shape"]
    def at(fn, v):
        return float(fn(mpmath.mpf(v))) if math.isfinite(v) else float("nan")
    y = torch.tensor([at(f, v) for v in x], dtype=torch.float64).reshape(shape)
    grads = None
    if "grads" in record:
        up = [decode(v) for v in record["upstream"]["values"]]
        grads = [torch.tensor([u * at(df, v) for u, v in zip(up, x)], dtype=torch.float64).reshape(shape)]
    return [y], grads


def run_torch(record, upcast=None):
    """PyTorch's outputs and input gradients for a record; `upcast` runs every
    floating input in that dtype instead (f32: the stand-in for missing
    f16/bf16 CPU kernels; f64: the exact reference)."""
    fn, _ = OPS[record["op"]]
    inputs = []
    for enc in record["inputs"]:
        t = tensor_of(enc)
        if upcast is not None and t.is_floating_point() and (upcast == torch.float64 or t.dtype in LOW):
            t = t.to(upcast)
        if enc["grad"]:
            t.requires_grad_()
        inputs.append(t)
    outputs = fn(inputs, record["args"] or {})
    grads = None
    if "upstream" in record:
        seeded = next(o for o in outputs if o.is_floating_point() and o.requires_grad)
        up = tensor_of(record["upstream"]).to(seeded.dtype)
        seeded.backward(up)
        grads = [t.grad for t in inputs]
    return outputs, grads


def max_abs(values):
    finite = values[torch.isfinite(values)]
    return finite.abs().max().item() if finite.numel() else 0.0


def compare(what, got_enc, want, tol_args, problems, round_to=None, skip=None, floor_eps=0.0):
    """Appends (kind, message) to problems where mixtape's `got_enc` and
    PyTorch's `want` differ, and returns the mask of differing elements
    (None when the shapes differ). tol_args: (ulps, scale) with scale the
    magnitude the bound is relative to besides each element's own (0:
    elementwise). round_to: a low dtype rounds an f32 reference to it, "got"
    rounds any reference to mixtape's dtype (the exact reference)."""
    got = tensor_of(got_enc)
    want = want.detach()
    if round_to == "got" and want.is_floating_point() and got.is_floating_point():
        want = want.to(got.dtype)
    elif isinstance(round_to, torch.dtype) and want.dtype == torch.float32:
        want = want.to(round_to)  # the f32 reference rounded once, as mixtape rounds
    if list(got.shape) != list(want.shape):
        problems.append(("value", f"{what}: shape {list(got.shape)} vs PyTorch {list(want.shape)}"))
        return None
    if got.dtype != want.dtype:
        problems.append(("dtype", f"{what}: dtype {got_enc['dtype']} vs PyTorch {want.dtype}"))
    g, w = got.double().flatten(), want.double().flatten()
    if not got.is_floating_point() or not want.is_floating_point():
        bad = g != w
    else:
        coarse = got.dtype if EPS.get(got.dtype, 0) >= EPS.get(want.dtype, 0) else want.dtype
        ulps, scale = tol_args
        # The op computes in its coarsest dtype: an f64 0-dim operand of an f16
        # op gets a gradient of f16 precision, in either library.
        eps = max(EPS[coarse], floor_eps)
        if isinstance(scale, torch.Tensor):
            scale = torch.where(torch.isfinite(scale), scale, torch.zeros_like(scale))
        tol = ulps * eps * (w.abs() + scale) + ulps * TINY[coarse]
        both_nan = torch.isnan(g) & torch.isnan(w)
        same_inf = torch.isinf(w) & (g == w)
        close = (g - w).abs() <= tol  # False for any NaN or a lone inf
        bad = ~(both_nan | same_inf | close)
    if skip is not None:
        bad &= ~skip
    if bad.any():
        i = int(torch.nonzero(bad)[0])
        problems.append(("value", f"{what}: {int(bad.sum())} of {bad.numel()} elements differ, first [{i}]: "
                                  f"{g[i].item()!r} vs PyTorch {w[i].item()!r}"))
    return bad


def overflowed(record, grad_enc):
    """Positions of a gradient whose elementwise forward output overflowed to
    inf in mixtape's low-precision dtype (the backward then reads inf, as
    PyTorch's own f16 kernels would; an f32 or f64 reference does not)."""
    if DTYPES[record["dtype"]] not in LOW or OPS[record["op"]][1]:
        return None
    out = tensor_of(record["outputs"][0]).double().flatten()
    if list(record["outputs"][0]["shape"]) != list(grad_enc["shape"]):
        return None
    return torch.isinf(out)


def compare_all(record, outputs, grads, round_to):
    """(problems, masks): the differences, and per compared tensor the mask of differing elements."""
    problems, masks = [], []
    _, accumulates = OPS[record["op"]]
    low_run = DTYPES[record["dtype"]] in LOW
    ulps_fwd = 2 if low_run else (16 if accumulates else 4)
    ulps_bwd = 4 if low_run else (64 if accumulates else 16)
    # A case whose inputs sit far from their spread (mean 1e4, spread 1) says so:
    # rounding the mean then costs eps * that much in every output, in PyTorch as in mixtape.
    condition = (record["args"] or {}).get("tolerance_scale", 1.0)
    floor_eps = max([EPS[DTYPES[i["dtype"]]] for i in record["inputs"] if DTYPES[i["dtype"]] in EPS] + [0.0])
    if len(outputs) != len(record["outputs"]):
        return [("value", f"{len(record['outputs'])} outputs vs PyTorch {len(outputs)}")], []
    # A rounding-order case (args "exact_forward") checks a one-ulp difference:
    # its outputs must equal PyTorch's bit for bit.
    if (record["args"] or {}).get("exact_forward"):
        ulps_fwd = 0
    for k, (enc, want) in enumerate(zip(record["outputs"], outputs)):
        scale = condition * max_abs(want.detach().double()) if accumulates else 0.0
        masks.append(compare(f"output {k}", enc, want, (ulps_fwd, scale), problems, round_to))
    if "grads" in record:
        upstream = max_abs(tensor_of(record["upstream"]).double())
        for k, (enc, want) in enumerate(zip(record["grads"], grads)):
            if enc is None and want is None:
                masks.append(None)
                continue
            if enc is None or want is None:
                problems.append(("value", f"grad {k}: {'missing' if enc is None else 'present'} in mixtape, "
                                          f"{'missing' if want is None else 'present'} in PyTorch"))
                masks.append(None)
                continue
            # Gradients are relative to what flows into them: the upstream gradient
            # (per element for elementwise ops, whose derivative terms are O(1)
            # where the result may cancel to nearly 0) and their own size.
            if accumulates:
                scale = condition * max(max_abs(want.double()), upstream)
            else:
                up = tensor_of(record["upstream"]).double()
                scale = up.abs().flatten() if list(up.shape) == list(enc["shape"]) else upstream
            masks.append(compare(f"grad {k}", enc, want, (ulps_bwd, scale), problems, round_to,
                                 overflowed(record, enc), floor_eps))
    elif grads is not None and any(g is not None for g in grads):
        problems.append(("value", "PyTorch has gradients, mixtape recorded none"))
    return problems, masks


def check(record):
    """Returns (status, notes): status is 'ok', 'accepted', 'closer_to_exact', 'both_refuse' or 'failed'."""
    op = record["op"]
    if "inputs" not in record:
        return "failed", [f"the case could not be built: {record.get('error', '?')[:160]}"]
    low = DTYPES[record["dtype"]] if DTYPES[record["dtype"]] in LOW else None
    round_to = None
    try:
        outputs, grads = run_torch(record)
    except Exception as e:  # PyTorch refuses with RuntimeError, IndexError, ValueError, ...
        if low is not None and "not implemented for" in str(e):
            outputs, grads = run_torch(record, upcast=torch.float32)
            round_to = low
        elif "error" in record:
            return "both_refuse", []
        else:
            return "failed", [f"PyTorch raised {e!s:.200} but mixtape ran"]
    if "error" in record:
        return "failed", [f"mixtape refused ({record['error'][:160]}) but PyTorch ran"]
    problems, masks = compare_all(record, outputs, grads, round_to)
    accepted = [text for kind, text in problems if (op, kind) in ACCEPTED]
    rest = [(kind, text) for kind, text in problems if (op, kind) not in ACCEPTED]
    if not rest:
        return ("accepted" if accepted else "ok"), accepted
    # Differences in value only: is mixtape right where PyTorch is not? Where
    # they differ, compare with PyTorch in f64 on the same inputs, rounded
    # once to mixtape's dtype.
    # (Not for an exact_forward case: being closer to the exact value is the
    # difference it exists to catch.)
    exact_available = (record["dtype"] != "f64" or op in EXACT) and not (record["args"] or {}).get("exact_forward")
    if exact_available and all(kind == "value" for kind, _ in rest) and None not in masks[:1]:
        if op in EXACT:
            exact_outputs, exact_grads = exact_elementwise(record)
        else:
            exact_outputs, exact_grads = run_torch(record, upcast=torch.float64)
        _, exact_masks = compare_all(record, exact_outputs, exact_grads, "got")
        if len(exact_masks) == len(masks) and all(
                m is None or (e is not None and not (m & e).any()) for m, e in zip(masks, exact_masks)):
            return "closer_to_exact", [text for _, text in rest]
    return "failed", [text for _, text in rest]


# ---------------------------------------------------------------- the reference models
# The PyTorch twins written out in models/*.h (same names and shapes), from
# tools/scripts/load_in_pytorch.py, loaded with mixtape's initial parameters.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "scripts"))
from load_in_pytorch import CNN, GPT, GPT_CONFIGS, LLAMA_CONFIGS, MLP, Llama, ResNet, router_losses  # noqa: E402


class FlatGPT(GPT):  # the records' loss is over every position: logits [B * T, vocab]
    def forward(self, tokens):
        return super().forward(tokens).reshape(-1, self.wte.weight.shape[0])


class FlatLlama(Llama):
    def forward(self, tokens):
        return super().forward(tokens).reshape(-1, self.lm_head.weight.shape[0])


TWINS = {"mlp": MLP, "cnn": CNN, "resnet": ResNet, "gpt-tiny": FlatGPT, "llama-tiny": FlatLlama,
         "gpt-moe-tiny": lambda: FlatGPT(**GPT_CONFIGS["gpt-moe-tiny"]),
         "llama-moe-tiny": lambda: FlatLlama(**LLAMA_CONFIGS["llama-moe-tiny"])}
# A model is dozens of accumulating ops deep and the two libraries sum in
# different orders, so each tensor of mixtape's f32 step is compared with the
# twin run in f64 (the exact reference) and passes when its error is within
# twice PyTorch's own f32 error, or within MODEL_TOL of the tensor's largest
# element (llm.c's test_gpt2 allows 1e-2 on gradients).
MODEL_TOL = 1e-5


def blob_tensor(blob, enc):
    dtype = DTYPES[enc["dtype"]]
    count = math.prod(enc["shape"])
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = bytearray(blob[enc["offset"]:enc["offset"] + count * itemsize])
    return torch.frombuffer(raw, dtype=dtype).reshape(enc["shape"]).clone() if count else \
        torch.empty(enc["shape"], dtype=dtype)


def run_twin(record, blob, dtype):
    twin = TWINS[record["model"]]().to(dtype)
    state = {n: blob_tensor(blob, e) for n, e in record["params"].items()}
    state.update({n: blob_tensor(blob, e) for n, e in record["buffers_before"].items()})
    state = {n: (t.to(dtype) if t.is_floating_point() else t) for n, t in state.items()}
    missing, unexpected = twin.load_state_dict(state, strict=False)
    twin.train()
    x, target = blob_tensor(blob, record["input"]), blob_tensor(blob, record["target"])
    x = x.to(dtype) if x.is_floating_point() else x
    logits = twin(x)
    loss = F.cross_entropy(logits, target)
    aux = router_losses(twin)  # a mixture of experts: in the gradient, not in the value
    if aux is not None:
        loss = loss + (aux - aux.detach())
    loss.backward()
    tensors = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    tensors.update({"grad " + n: p.grad for n, p in twin.named_parameters()})
    tensors.update({"buffer " + n: b for n, b in twin.named_buffers()})
    return tensors, (missing, unexpected)


def check_model(record, blob):
    """Problems found comparing one model record with its PyTorch twin, and
    the largest errors relative to each tensor's largest element (mixtape's,
    PyTorch f32's), both against the twin in f64."""
    exact, (missing, unexpected) = run_twin(record, blob, torch.float64)
    torch32, _ = run_twin(record, blob, torch.float32)
    problems = [f"names differ from the twin: missing {missing}, unexpected {unexpected}"] if missing or unexpected else []
    got = {"logits": blob_tensor(blob, record["logits"]), "loss": torch.tensor([record["loss"]])}
    got.update({"grad " + n: blob_tensor(blob, e) for n, e in record["grads"].items()})
    got.update({"buffer " + n: blob_tensor(blob, e) for n, e in record["buffers_after"].items()})
    worst_mixtape = worst_torch = 0.0
    # A gradient that is exactly 0 in theory (a conv bias before training-mode
    # BatchNorm) is rounding noise in both: its scale is floored at 1e-3 of
    # the model's largest gradient, so the report reads in useful units.
    floor = 1e-3 * max(t.abs().max().item() for n, t in exact.items() if n.startswith("grad "))
    for name, want in exact.items():
        if name not in got:
            problems.append(f"{name} missing from mixtape's record")
            continue
        if not want.is_floating_point():
            if not torch.equal(got[name], want):
                problems.append(f"{name} differs")
            continue
        want = want.double()
        scale = max(want.abs().max().item(), floor if name.startswith("grad ") else 0.0) or 1.0
        err_m = (got[name].double() - want).abs().max().item() / scale
        err_t = (torch32[name].double() - want).abs().max().item() / scale
        worst_mixtape, worst_torch = max(worst_mixtape, err_m), max(worst_torch, err_t)
        if err_m > max(2 * err_t, MODEL_TOL):
            problems.append(f"{name} off by {err_m:.2e} of its largest element (PyTorch f32: {err_t:.2e})")
    return problems, (worst_mixtape, worst_torch)


def check_models(path):
    """0 failures, or the count; prints one line per model record."""
    if not os.path.exists(path + ".models.jsonl"):
        return 0
    with open(path + ".models.bin", "rb") as f:
        blob = f.read()
    failures = 0
    with open(path + ".models.jsonl") as f:
        for line in f:
            record = json.loads(line)
            problems, (err_m, err_t) = check_model(record, blob)
            status = "FAIL" if problems else "ok"
            failures += bool(problems)
            print(f"{status} model {record['model']} [{record['device']} {record['dtype']}]: loss {record['loss']:.6f}; "
                  f"largest error against the f64 twin (logits, loss, every gradient and buffer): "
                  f"mixtape {err_m:.1e}, PyTorch f32 {err_t:.1e}" + ("; " + "; ".join(problems) if problems else ""))
    return failures


def main():
    if len(sys.argv) != 2:
        print("usage: check_parity.py records.jsonl", file=sys.stderr)
        return 2
    counts = {"ok": 0, "accepted": 0, "closer_to_exact": 0, "failed": 0, "both_refuse": 0}
    failures, closer = [], {}
    record_ops = set()
    with open(sys.argv[1]) as f:
        for line in f:
            record = json.loads(line)
            record_ops.add(record["op"])
            status, problems = check(record)
            counts[status] += 1
            if status == "failed":
                failures.append((record, problems))
            if status == "closer_to_exact":
                closer.setdefault(record["name"], []).append(f"{record['device']} {record['dtype']}")
    for record, problems in failures:
        print(f"FAIL {record['name']} [{record['device']} {record['dtype']}]: " + "; ".join(problems))
    total = sum(counts.values())
    print(f"check_parity: {total} records: {counts['ok']} match, {counts['accepted']} accepted differences, "
          f"{counts['closer_to_exact']} differ where mixtape is the one matching the exact result, "
          f"{counts['both_refuse']} refused by both, {counts['failed']} differ")
    for name, runs in sorted(closer.items()):
        print(f"  closer to exact than PyTorch 1.13: {name} [{', '.join(runs)}]")
    for (op, what), reason in ACCEPTED.items():
        print(f"  accepted: {op} {what}: {reason}")
    for name, reason in NOT_COMPARED.items():
        print(f"  partly compared: {name}: {reason}")
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "autograd", "ops.h")
    uncovered = check_coverage(header, record_ops)
    if uncovered:
        print(f"FAIL coverage: autograd/ops.h functions without a parity case: {', '.join(uncovered)}")
    else:
        print("check_parity: every function of autograd/ops.h has parity cases")
    model_failures = check_models(sys.argv[1])
    return 1 if failures or model_failures or uncovered else 0


if __name__ == "__main__":
    sys.exit(main())
