"""dscore's `mlp` model plugin (plugins/models/mlp) and its synthetic data,
ported to PyTorch so that DeepSpeed can train the very same problem.

What must agree bit for bit with dscore, and how it does:
- the counter-based random numbers (sdk/include/dscore/cpp/counter_rng.hpp:
  splitmix64, hash_key, FNV-1a names, Box-Muller) are integer arithmetic
  plus math.log/math.cos/math.sqrt, the same libm calls the C++ makes;
- the initial parameters (mlp.cc init_param: uniform(-1/sqrt(fan_in),
  1/sqrt(fan_in)) keyed by (seed, hash of the parameter name, element));
- the teacher network and its output scale (teacher.cc), in double as there;
- the batches: sample i of the run is synthetic_batch(seed, i), and
  micro-batch m of rank r at optimizer step s starts at sample
  s*T + m*micro*W + r*micro (core/data/sampler.h);
- the forward and backward arithmetic (mlp_math.cc): plain loops with no
  FMA (the plugin is built without -march, so no contraction), summed in
  the loops' order. The layers below repeat those loops with elementwise
  torch ops in the same order, so every float32 rounding is the same as
  dscore's, and DeepSpeed's engine (ZeRO, accumulation, reduction,
  clipping, optimizer, schedule) is what the comparison measures.
"""
import ctypes
import ctypes.util
import math

import numpy as np
import torch

# std::tanh(float) is libm's tanhf; torch.tanh rounds differently in the last bit.
_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.tanhf.restype = ctypes.c_float
_libm.tanhf.argtypes = [ctypes.c_float]

MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def hash_key(a, b, c, d=0):
    return splitmix64(splitmix64(splitmix64(splitmix64(a) ^ b) ^ c) ^ d)


def hash_name(name):
    h = 0xCBF29CE484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001B3) & MASK
    return h


def uniform01(bits):
    return float(bits >> 11) * 2.0**-53


def normal_at(a, b, c):
    u1 = 1.0 - uniform01(hash_key(a, b, c, 1))
    u2 = uniform01(hash_key(a, b, c, 2))
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def f32(v):
    return float(np.float32(v))


class Teacher:
    """teacher.cc: tanh(W1 x + b1) -> W2, each output scaled to unit rms."""

    WIDTH = 32
    PROBES = 4096

    def __init__(self, seed, input_dim, output_dim):
        self.input_dim, self.output_dim = input_dim, output_dim
        in_scale = 0.5 / math.sqrt(input_dim)
        hidden_scale = 1.0 / math.sqrt(self.WIDTH)
        self.w1 = [normal_at(seed, 1, k) * in_scale for k in range(self.WIDTH * input_dim)]
        self.b1 = [0.5 * normal_at(seed, 2, k) for k in range(self.WIDTH)]
        self.w2 = [normal_at(seed, 3, k) * hidden_scale for k in range(output_dim * self.WIDTH)]
        sum_sq = [0.0] * output_dim
        for p in range(self.PROBES):
            x = [normal_at(seed, 4, p * input_dim + i) for i in range(input_dim)]
            for k, y in enumerate(self._raw(x)):
                sum_sq[k] += y * y
        self.scale = []
        for s in sum_sq:
            rms = math.sqrt(s / self.PROBES)
            self.scale.append(1.0 / rms if rms > 0 else 1.0)

    def _raw(self, x):
        n = self.input_dim
        h = []
        for j in range(self.WIDTH):
            acc = self.b1[j]
            row = self.w1[j * n:(j + 1) * n]
            for i in range(n):
                acc += row[i] * x[i]
            h.append(math.tanh(acc))
        out = []
        for k in range(self.output_dim):
            acc = 0.0
            row = self.w2[k * self.WIDTH:(k + 1) * self.WIDTH]
            for j in range(self.WIDTH):
                acc += row[j] * h[j]
            out.append(acc)
        return out

    def evaluate(self, x):
        return [f32(y * s) for y, s in zip(self._raw(x), self.scale)]


def synthetic_samples(seed, teacher, first, count):
    """x (count, input_dim) and y (count, output_dim), float32: mlp.cc synthetic_batch."""
    xs, ys = [], []
    for s in range(first, first + count):
        x = [f32(normal_at(seed, s, j)) for j in range(teacher.input_dim)]
        xs.append(x)
        ys.append(teacher.evaluate(x))
    return torch.tensor(xs, dtype=torch.float32), torch.tensor(ys, dtype=torch.float32)


def micro_batch_first_sample(step, micro_step, rank, world, train_batch, micro):
    """core/data/sampler.h DistributedSampler::micro_batch (step 0-based)."""
    return step * train_batch + micro_step * micro * world + rank * micro


def init_values(seed, name, fan_in, numel):
    bound = 1.0 / math.sqrt(fan_in)
    h = hash_name(name)
    return [f32((2.0 * uniform01(hash_key(seed, h, k)) - 1.0) * bound) for k in range(numel)]


def _forward_loops(x, w, b):
    """mlp_math.cc linear_forward: acc = sum_i x[s,i]*w[o,i] in i order, then + b."""
    acc = torch.zeros(x.shape[0], w.shape[0], dtype=torch.float32)
    for i in range(x.shape[1]):
        acc = acc + x[:, i:i + 1] * w[:, i].unsqueeze(0)
    return acc + b.unsqueeze(0)


class _LinearLoops(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, w, b):
        # Parameters of any dtype are read as float32; activations stay float32 (plugins/models/mlp/pass_buffers.h).
        ctx.save_for_backward(x, w)
        return _forward_loops(x, w.float(), b.float())

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        wf = w.float()
        batch, n_in = x.shape
        # linear_backward: per sample s in order, gb += dy[s]; gw += dy[s] x[s]^T;
        # dx[s, i] = sum over o in order of dy[s, o] * w[o, i].
        gw = torch.zeros_like(wf)
        gb = torch.zeros(wf.shape[0], dtype=torch.float32)
        for s in range(batch):
            gb = gb + dy[s]
            gw = gw + dy[s].unsqueeze(1) * x[s].unsqueeze(0)
        dx = torch.zeros(batch, n_in, dtype=torch.float32)
        for o in range(wf.shape[0]):
            dx = dx + dy[:, o:o + 1] * wf[o].unsqueeze(0)
        return dx, gw.to(w.dtype), gb.to(w.dtype)


class _TanhLoops(torch.autograd.Function):
    """activate / activate_grad for tanh: t = tanhf(z); dz = da * (1 - t*t)."""

    @staticmethod
    def forward(ctx, z):
        t = torch.tensor([_libm.tanhf(v) for v in z.flatten().tolist()],
                         dtype=torch.float32).view(z.shape)
        ctx.save_for_backward(t)
        return t

    @staticmethod
    def backward(ctx, da):
        (t,) = ctx.saved_tensors
        return da * (1.0 - t * t)


def mse_double(pred, y):
    """run_forward's loss: sum of squared differences in double, in element order, / n."""
    total = 0.0
    for p, t in zip(pred.detach().flatten().tolist(), y.flatten().tolist()):
        d = p - t
        total += d * d
    return total / pred.numel()


class _MseLoss(torch.autograd.Function):
    """Returns mse_double rounded to float32 (autograd needs a tensor); its
    gradient is 2*g/(B*out) * (pred - y) in float32 with g the incoming
    gradient (1/gas under DeepSpeed's accumulation), as forward_backward."""

    @staticmethod
    def forward(ctx, pred, y):
        ctx.save_for_backward(pred, y)
        return torch.tensor(mse_double(pred, y), dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        pred, y = ctx.saved_tensors
        factor = np.float32(2.0 * float(grad) / pred.numel())
        return torch.tensor(factor) * (pred - y), None


class Linear(torch.nn.Module):
    """One "layers.{l}" layer; a module of its own so that ZeRO-3 gathers
    its parameters around its forward."""

    def __init__(self, seed, name, n_in, n_out):
        super().__init__()
        w = init_values(seed, f"{name}.weight", n_in, n_out * n_in)
        b = init_values(seed, f"{name}.bias", n_in, n_out)
        self.weight = torch.nn.Parameter(torch.tensor(w, dtype=torch.float32).view(n_out, n_in))
        self.bias = torch.nn.Parameter(torch.tensor(b, dtype=torch.float32))

    def forward(self, h):
        return _LinearLoops.apply(h, self.weight, self.bias)


class Mlp(torch.nn.Module):
    """Linear layers "layers.{l}" of dims [input, hidden x n_hidden, output], tanh between."""

    def __init__(self, seed, input_dim, hidden_dim, output_dim, n_hidden_layers):
        super().__init__()
        dims = [input_dim] + [hidden_dim] * n_hidden_layers + [output_dim]
        self.layers = torch.nn.ModuleList(
            Linear(seed, f"layers.{l}", dims[l], dims[l + 1]) for l in range(len(dims) - 1))
        self.last_loss = None

    def forward(self, x, y):
        h = x
        for l, layer in enumerate(self.layers):
            h = layer(h)
            if l + 1 < len(self.layers):
                h = _TanhLoops.apply(h)
        self.last_loss = mse_double(h, y)  # the exact double dscore reports
        return _MseLoss.apply(h, y)
