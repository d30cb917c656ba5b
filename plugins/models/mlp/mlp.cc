// The built-in "mlp" model: Linear -> activation -> ... -> Linear with a
// mean-squared-error loss on a synthetic teacher task. It is the engine's
// test model: small, exact, deterministic, and it drives forward/backward
// through the host hooks exactly as model.h prescribes (acquire/release per
// layer, reverse-order backward, grads_ready per layer).
#include <dscore/model.h>
#include <dscore/cpp/dtype.hpp>
#include <dscore/cpp/model.hpp>
#include <dscore/cpp/model_plugin.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <dscore/cpp/counter_rng.hpp>
#include "mlp_math.h"
#include "pass_buffers.h"
#include "teacher.h"

namespace dscore::mlp {
namespace {

using sdk::Error;

constexpr const char kParamsSchema[] = R"json({
  "input_dim": {"type": "int", "default": 16, "min": 1, "doc": "features per sample (input \"x\")"},
  "hidden_dim": {"type": "int", "default": 64, "min": 1, "doc": "width of every hidden layer"},
  "output_dim": {"type": "int", "default": 4, "min": 1, "doc": "targets per sample (input \"y\")"},
  "n_hidden_layers": {"type": "int", "default": 2, "min": 0,
                      "doc": "hidden layers; the model has n_hidden_layers + 1 linear layers"},
  "activation": {"type": "string", "default": "gelu", "enum": ["tanh", "relu", "gelu"],
                 "doc": "after every hidden layer; gelu is GPT-2's tanh approximation"},
  "teacher_seed": {"type": "int", "default": 1234, "min": 0,
                   "doc": "seed of the fixed random network that synthetic_batch's targets come from"}
})json";

// An int parameter checked against its schema minimum (the host checks it
// too; this keeps a bad value from reaching the allocations).
int64_t integer_at_least(const sdk::Params& p, const char* name, int64_t min) {
  int64_t v = p.integer(name);
  if (v < min)
    throw Error(DSCORE_INVALID_ARGUMENT, std::string(name) + " = " + std::to_string(v) +
                                             " must be >= " + std::to_string(min));
  return v;
}

class Mlp : public sdk::Instance {
 public:
  Mlp(sdk::HostRef host, const sdk::Params& p)
      : Instance(host),
        seed_(p.args()->seed),
        input_dim_(integer_at_least(p, "input_dim", 1)),
        output_dim_(integer_at_least(p, "output_dim", 1)),
        teacher_(static_cast<uint64_t>(p.integer("teacher_seed")), input_dim_, output_dim_) {
    int64_t hidden = integer_at_least(p, "hidden_dim", 1);
    int64_t n_hidden = integer_at_least(p, "n_hidden_layers", 0);
    std::string act = p.string("activation");
    if (act == "tanh")
      activation_ = Activation::kTanh;
    else if (act == "relu")
      activation_ = Activation::kRelu;
    else if (act == "gelu")
      activation_ = Activation::kGelu;
    else
      throw Error(DSCORE_INVALID_ARGUMENT,
                  "activation \"" + act + "\" is not one of tanh, relu, gelu");
    dims_.push_back(input_dim_);
    for (int64_t l = 0; l < n_hidden; ++l) dims_.push_back(hidden);
    dims_.push_back(output_dim_);
    describe_layers(hidden);
  }

  const dscore_model_description* description() const { return &description_; }

  void init_param(size_t index, int64_t offset, int64_t count, dscore_tensor* out) const {
    if (index >= params_.size())
      throw Error(DSCORE_OUT_OF_RANGE, "parameter index " + std::to_string(index) +
                                           " out of range: the model has " +
                                           std::to_string(params_.size()) + " parameters");
    const Param& p = *params_[index];
    if (offset < 0 || count < 0 || offset + count > p.desc.numel)
      throw Error(DSCORE_OUT_OF_RANGE, "slice [" + std::to_string(offset) + ", " +
                                           std::to_string(offset + count) + ") of " + p.name +
                                           " is outside its " + std::to_string(p.desc.numel) +
                                           " elements");
    check_cpu_float(out, count, "init_param output");
    // PyTorch nn.Linear: weight and bias uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.fan_in));
    const uint64_t name_hash = sdk::hash_name(p.name);
    for (int64_t k = 0; k < count; ++k) {
      double u = sdk::uniform01(sdk::hash_key(seed_, name_hash, static_cast<uint64_t>(offset + k)));
      sdk::store_float(out, k, static_cast<float>((2.0 * u - 1.0) * bound));
    }
  }

  void synthetic_batch(uint64_t seed, int64_t first_sample, const dscore_batch* out) const {
    check_batch(out, /*need_targets=*/true);
    const int64_t n = out->batch_size;
    std::vector<float> x(static_cast<size_t>(input_dim_)), y(static_cast<size_t>(output_dim_));
    for (int64_t s = 0; s < n; ++s) {
      const uint64_t sample = static_cast<uint64_t>(first_sample + s);
      for (int64_t j = 0; j < input_dim_; ++j) {
        const dscore_tensor* xt = out->tensors[0];
        sdk::store_float(xt, s * input_dim_ + j,
                         static_cast<float>(sdk::normal_at(seed, sample, j)));
        x[j] = sdk::load_float(xt, s * input_dim_ + j);  // the teacher sees the stored x
      }
      teacher_.evaluate(x.data(), y.data());
      const dscore_tensor* yt = out->tensors[1];
      for (int64_t k = 0; k < output_dim_; ++k) sdk::store_float(yt, s * output_dim_ + k, y[k]);
    }
  }

  // Forward through all layers into `pass`; returns the mean squared error
  // when the batch has targets.
  double run_forward(const dscore_batch* batch, const dscore_model_hooks* hooks, bool need_loss,
                     PassBuffers* pass) const {
    pass->set_input(batch->tensors[0]);
    forward_layers(0, layer_count(), batch->batch_size, *hooks, pass);
    return need_loss ? squared_error(batch, pass) : 0.0;
  }

  // Layers [first, end) forward; input(first) is set.
  void forward_layers(size_t first, size_t end, int64_t B, const dscore_model_hooks& hooks,
                      PassBuffers* pass) const {
    const size_t L = layer_count();
    for (size_t l = first; l < end; ++l) {
      const int64_t in = dims_[l], out = dims_[l + 1];
      sdk::AcquiredLayer layer(hooks, l, DSCORE_ACQUIRE_FORWARD, 2);
      check_views(layer.views(), l, false);
      const float* w = pass->fp32(layer.views().params[0], out * in, PassBuffers::kWeight);
      const float* b = pass->fp32(layer.views().params[1], out, PassBuffers::kBias);
      float* z = pass->pre(l);
      linear_forward(pass->input(l), w, b, B, in, out, z);
      layer.release();
      if (l + 1 < L) {
        float* a = pass->activation(l + 1);
        for (int64_t k = 0; k < B * out; ++k) a[k] = activate(activation_, z[k]);
      }
    }
  }

  double squared_error(const dscore_batch* batch, PassBuffers* pass) const {
    const int64_t B = batch->batch_size;
    const float* y = pass->fp32(batch->tensors[1], B * output_dim_, PassBuffers::kTargets);
    const float* pred = pass->input(layer_count());
    double sum = 0;
    for (int64_t k = 0; k < B * output_dim_; ++k) {
      double d = static_cast<double>(pred[k]) - y[k];
      sum += d * d;
    }
    return sum / static_cast<double>(B * output_dim_);
  }

  // d(loss_scale * mean((pred - y)^2)) / d pred into pass->dz.
  void loss_gradient(const dscore_batch* batch, double loss_scale, PassBuffers* pass) const {
    const int64_t B = batch->batch_size;
    const float* y = pass->fp32(batch->tensors[1], B * output_dim_, PassBuffers::kTargets);
    const float* pred = pass->input(layer_count());
    const float factor =
        static_cast<float>(2.0 * loss_scale / static_cast<double>(B * output_dim_));
    std::vector<float>& dz = pass->dz;
    dz.resize(static_cast<size_t>(B * output_dim_));
    for (int64_t k = 0; k < B * output_dim_; ++k) dz[k] = factor * (pred[k] - y[k]);
  }

  // Layers [first, end) backward from pass->dz, the gradient at layer
  // end - 1's pre-activation. On return with first > 0, pass->da holds the
  // gradient at input(first) (before the previous layer's activation).
  void backward_layers(size_t first, size_t end, int64_t B, const dscore_model_hooks& hooks,
                       PassBuffers* pass) const {
    std::vector<float>&dz = pass->dz, &gw = pass->gw, &gb = pass->gb, &da = pass->da;
    for (size_t l = end; l-- > first;) {
      const int64_t in = dims_[l], out = dims_[l + 1];
      sdk::AcquiredLayer layer(hooks, l, DSCORE_ACQUIRE_BACKWARD, 2);
      check_views(layer.views(), l, true);
      const float* w = pass->fp32(layer.views().params[0], out * in, PassBuffers::kWeight);
      gw.assign(static_cast<size_t>(out * in), 0.0f);
      gb.assign(static_cast<size_t>(out), 0.0f);
      if (l > 0) da.resize(static_cast<size_t>(B * in));
      linear_backward(pass->input(l), w, dz.data(), B, in, out, gw.data(), gb.data(),
                      l > 0 ? da.data() : nullptr);
      add_into(layer.views().grads[0], gw);
      add_into(layer.views().grads[1], gb);
      layer.grads_ready();
      layer.release();
      if (l > first) {  // through the previous layer's activation
        const float* z = pass->pre(l - 1);
        dz.resize(da.size());
        for (size_t k = 0; k < da.size(); ++k) dz[k] = da[k] * activate_grad(activation_, z[k]);
      }
    }
  }

  // output, when given: the predictions, (batch_size, output_dim).
  void forward(const dscore_batch* batch, const dscore_model_hooks& hooks, double* loss,
               dscore_tensor* output) const {
    if (batch == nullptr) throw Error(DSCORE_INVALID_ARGUMENT, "the batch is NULL");
    if (output != nullptr)
      check_cpu_float(output, batch->batch_size * output_dim_, "forward output");
    check_batch(batch, loss != nullptr);
    PassBuffers pass(dims_, batch->batch_size);
    const double value = run_forward(batch, &hooks, loss != nullptr, &pass);
    if (loss != nullptr) *loss = value;
    if (output != nullptr) {
      const float* pred = pass.input(layer_count());
      for (int64_t k = 0; k < batch->batch_size * output_dim_; ++k)
        sdk::store_float(output, k, pred[k]);
    }
  }

  double forward_backward(const dscore_batch* batch, const dscore_model_hooks& hooks,
                          double loss_scale) const {
    check_batch(batch, true);
    PassBuffers pass(dims_, batch->batch_size);
    const double loss = run_forward(batch, &hooks, true, &pass);
    pass.start_backward();
    loss_gradient(batch, loss_scale, &pass);
    backward_layers(0, layer_count(), batch->batch_size, hooks, &pass);
    return loss;
  }

  // ---- pipeline stages: the boundary at layer l is its input activation,
  // (B, dims[l]) fp32; its gradient is taken before the previous layer's
  // activation function, which the stage before applies.
  uint64_t boundary_bytes(size_t layer, int64_t micro_batch, dscore_dtype /*dtype*/) const {
    if (layer == 0 || layer >= layer_count())
      throw Error(DSCORE_OUT_OF_RANGE, "no stage boundary at layer " + std::to_string(layer) +
                                           ": the mlp's are at layers 1 to " +
                                           std::to_string(layer_count() - 1));
    if (micro_batch < 1) throw Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
    return static_cast<uint64_t>(micro_batch * dims_[layer]) * sizeof(float);
  }

  void stage_forward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                     const dscore_model_hooks& hooks, const void* input, void* output) {
    const bool first = stage.first_layer == 0, last = stage.end_layer == layer_count();
    check_batch(batch, /*need_targets=*/false);
    check_boundary(input, !first, "input");
    check_boundary(output, !last, "output");
    const int64_t B = batch->batch_size;
    PassBuffers& pass = slot_pass(slot, B);
    if (first)
      pass.set_input(batch->tensors[0]);
    else
      copy_floats(pass.activation(stage.first_layer), input, B * dims_[stage.first_layer]);
    forward_layers(stage.first_layer, stage.end_layer, B, hooks, &pass);
    if (!last) copy_floats(output, pass.input(stage.end_layer), B * dims_[stage.end_layer]);
  }

  double stage_backward(const dscore_pipeline_stage& stage, size_t slot, const dscore_batch* batch,
                        const dscore_model_hooks& hooks, double loss_scale, const void* output_grad,
                        void* input_grad) {
    const bool first = stage.first_layer == 0, last = stage.end_layer == layer_count();
    check_batch(batch, /*need_targets=*/last);
    check_boundary(output_grad, !last, "output_grad");
    check_boundary(input_grad, !first, "input_grad");
    const int64_t B = batch->batch_size;
    if (slot >= slots_.size() || slots_[slot] == nullptr || slot_batch_[slot] != B)
      throw Error(DSCORE_FAILED_PRECONDITION,
                  "stage_backward of slot " + std::to_string(slot) + " before its stage_forward");
    PassBuffers& pass = *slots_[slot];
    pass.start_backward();
    double loss = 0;
    if (last) {
      loss = squared_error(batch, &pass);
      loss_gradient(batch, loss_scale, &pass);
    } else {
      // The gradient at the boundary, through this stage's last activation.
      const size_t l = stage.end_layer;
      const float* z = pass.pre(l - 1);
      const float* d = static_cast<const float*>(output_grad);
      pass.dz.resize(static_cast<size_t>(B * dims_[l]));
      for (size_t k = 0; k < pass.dz.size(); ++k)
        pass.dz[k] = d[k] * activate_grad(activation_, z[k]);
    }
    backward_layers(stage.first_layer, stage.end_layer, B, hooks, &pass);
    if (!first) copy_floats(input_grad, pass.da.data(), B * dims_[stage.first_layer]);
    return loss;
  }

  // Everything a forward_backward() allocates (PassSizes), counted with the
  // fp32 copies 16-bit views need: an fp32 pass allocates that much less.
  // The mlp has no activation checkpointing: the same either way.
  uint64_t activation_bytes(int64_t micro_batch, bool /*checkpointing*/) const {
    if (micro_batch < 1) throw Error(DSCORE_INVALID_ARGUMENT, "micro_batch must be >= 1");
    return PassSizes(dims_, micro_batch).forward_backward_bytes(/*sixteen_bit_views=*/true);
  }

  // A pipeline stage's: each slot holds a whole pass's buffers (slot_pass
  // makes PassBuffers for every layer), nothing is shared.
  sdk::StageMemory stage_activation_bytes(const dscore_pipeline_stage&, int64_t micro_batch,
                                          bool checkpointing, dscore_dtype, dscore_dtype) const {
    return {activation_bytes(micro_batch, checkpointing), 0};
  }

  size_t layer_count() const { return dims_.size() - 1; }

  // Forward FLOPs of linear layer l for `batch` samples: the matmul
  // (2·in·out per sample) plus bias and activation (about out each).
  double layer_flops(size_t l, int64_t batch) const {
    if (l >= layer_count()) throw Error(DSCORE_INVALID_ARGUMENT, "no layer " + std::to_string(l));
    const double in = static_cast<double>(dims_[l]), out = static_cast<double>(dims_[l + 1]);
    return static_cast<double>(batch) * (2.0 * in * out + 2.0 * out);
  }
  int64_t output_dim() const { return output_dim_; }

  // What check_cpu_float checks, without the message.
  static bool is_cpu_float(const dscore_tensor* t, int64_t numel) {
    return t != nullptr && (t->data != nullptr || numel == 0) &&
           (t->device_type == DSCORE_DEVICE_CPU || t->device_type == DSCORE_DEVICE_CUDA_HOST) &&
           (t->dtype == DSCORE_DTYPE_F32 || t->dtype == DSCORE_DTYPE_BF16 ||
            t->dtype == DSCORE_DTYPE_F16) &&
           t->numel == numel && t->strides == nullptr;
  }
  static void check_cpu_float(const dscore_tensor* t, int64_t numel, const std::string& what) {
    if (t == nullptr || (t->data == nullptr && numel > 0))
      throw Error(DSCORE_INVALID_ARGUMENT, what + " is NULL");
    if (t->device_type != DSCORE_DEVICE_CPU && t->device_type != DSCORE_DEVICE_CUDA_HOST)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  what + " is not in CPU memory: the mlp model computes on CPU");
    if (t->dtype != DSCORE_DTYPE_F32 && t->dtype != DSCORE_DTYPE_BF16 &&
        t->dtype != DSCORE_DTYPE_F16)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  what + " is " + sdk::dtype_name(t->dtype) + ": expected fp32, bf16 or fp16");
    if (t->numel != numel || t->strides != nullptr)
      throw Error(DSCORE_INVALID_ARGUMENT, what + " has " + std::to_string(t->numel) +
                                               " elements (dense expected), expected " +
                                               std::to_string(numel));
  }

 private:
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    int64_t fan_in;
    dscore_model_param desc{};
  };
  struct Layer {
    std::string name;
    std::vector<const dscore_model_param*> params;
    dscore_model_layer desc{};
  };

  void describe_layers(int64_t hidden) {
    for (size_t l = 0; l + 1 < dims_.size(); ++l) {
      const int64_t in = dims_[l], out = dims_[l + 1];
      auto layer = std::make_unique<Layer>();
      layer->name = "layers." + std::to_string(l);
      for (int bias = 0; bias < 2; ++bias) {
        auto p = std::make_unique<Param>();
        p->name = layer->name + (bias ? ".bias" : ".weight");
        p->shape = bias ? std::vector<int64_t>{out} : std::vector<int64_t>{out, in};
        p->fan_in = in;
        p->desc.struct_size = sizeof(dscore_model_param);
        p->desc.name = p->name.c_str();
        p->desc.ndim = static_cast<int32_t>(p->shape.size());
        p->desc.shape = p->shape.data();
        p->desc.numel = bias ? out : out * in;
        p->desc.flags = bias ? DSCORE_PARAM_NO_WEIGHT_DECAY : 0u;
        layer->params.push_back(&p->desc);
        params_.push_back(std::move(p));
      }
      layer->desc.struct_size = sizeof(dscore_model_layer);
      layer->desc.name = layer->name.c_str();
      layer->desc.param_count = layer->params.size();
      layer->desc.params = layer->params.data();
      layer_ptrs_.push_back(&layer->desc);
      layers_.push_back(std::move(layer));
    }
    input_shapes_[0] = input_dim_;
    input_shapes_[1] = output_dim_;
    const char* names[2] = {"x", "y"};
    for (int k = 0; k < 2; ++k) {
      inputs_[k] = {sizeof(dscore_model_input), names[k], DSCORE_DTYPE_F32, 1, &input_shapes_[k]};
      input_ptrs_[k] = &inputs_[k];
    }
    description_.struct_size = sizeof description_;
    description_.layer_count = layer_ptrs_.size();
    description_.layers = layer_ptrs_.data();
    description_.input_count = 2;
    description_.inputs = input_ptrs_;
    description_.hidden_size = hidden;
  }

  void check_batch(const dscore_batch* batch, bool need_targets) const {
    if (batch == nullptr || batch->batch_size <= 0)
      throw Error(DSCORE_INVALID_ARGUMENT, "the batch is NULL or empty");
    const size_t needed = need_targets ? 2 : 1;
    if (batch->count < needed)
      throw Error(DSCORE_INVALID_ARGUMENT, "the batch has " + std::to_string(batch->count) +
                                               " tensors; the mlp model needs \"x\" and \"y\"");
    check_cpu_float(batch->tensors[0], batch->batch_size * input_dim_, "batch input \"x\"");
    if (need_targets)
      check_cpu_float(batch->tensors[1], batch->batch_size * output_dim_, "batch input \"y\"");
  }

  // Count and presence are checked by sdk::AcquiredLayer; here the shapes
  // and dtypes. Names are built only for an error: a pass allocates nothing
  // beyond its PassBuffers.
  void check_views(const dscore_layer_views& v, size_t l, bool backward) const {
    const int64_t numel[2] = {dims_[l + 1] * dims_[l], dims_[l + 1]};
    for (int k = 0; k < 2; ++k) {
      auto name = [&] { return layers_[l]->name + (k ? ".bias" : ".weight"); };
      if (!is_cpu_float(v.params[k], numel[k]))
        check_cpu_float(v.params[k], numel[k], "parameter " + name());
      if (backward && !is_cpu_float(v.grads[k], numel[k]))
        check_cpu_float(v.grads[k], numel[k], "gradient of " + name());
    }
  }

  static void check_boundary(const void* p, bool needed, const char* what) {
    if ((p != nullptr) != needed)
      throw Error(DSCORE_INVALID_ARGUMENT,
                  std::string("the stage's ") + what +
                      (needed ? " boundary is NULL" : " boundary is set where the stage has none"));
  }
  static void copy_floats(void* dst, const void* src, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
  // Slot `slot`'s pass, made anew when the micro-batch size changes.
  PassBuffers& slot_pass(size_t slot, int64_t B) {
    if (slot >= slots_.size()) {
      slots_.resize(slot + 1);
      slot_batch_.resize(slot + 1, 0);
    }
    if (slots_[slot] == nullptr || slot_batch_[slot] != B) {
      slots_[slot] = std::make_unique<PassBuffers>(dims_, B);
      slot_batch_[slot] = B;
    }
    return *slots_[slot];
  }

  static void add_into(dscore_tensor* grad, const std::vector<float>& g) {
    if (grad->dtype == DSCORE_DTYPE_F32) {
      float* dst = static_cast<float*>(grad->data);
      for (size_t k = 0; k < g.size(); ++k) dst[k] += g[k];
      return;
    }
    for (size_t k = 0; k < g.size(); ++k) {
      int64_t i = static_cast<int64_t>(k);
      sdk::store_float(grad, i, sdk::load_float(grad, i) + g[k]);
    }
  }

  uint64_t seed_;
  int64_t input_dim_;
  int64_t output_dim_;
  Activation activation_ = Activation::kGelu;
  Teacher teacher_;
  std::vector<int64_t> dims_;  // dims_[l] = input width of layer l; back() = output_dim
  std::vector<std::unique_ptr<Param>> params_;  // init_param's index order
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<const dscore_model_layer*> layer_ptrs_;
  int64_t input_shapes_[2] = {0, 0};
  dscore_model_input inputs_[2]{};
  const dscore_model_input* input_ptrs_[2] = {nullptr, nullptr};
  dscore_model_description description_{};
  // Pipeline stages: one pass per activation slot, and its micro-batch size.
  std::vector<std::unique_ptr<PassBuffers>> slots_;
  std::vector<int64_t> slot_batch_;
};

const dscore_plugin_descriptor kMlp = sdk::model_descriptor<Mlp>(
    "mlp", "0.1.0",
    "multi-layer perceptron with MSE loss on a synthetic teacher task (tests, examples)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_F16 | DSCORE_CAP_BF16, kParamsSchema);

}  // namespace
}  // namespace dscore::mlp

DSCORE_PLUGIN_LIBRARY("dscore-mlp", "0.1.0", "dscore", &dscore::mlp::kMlp)
