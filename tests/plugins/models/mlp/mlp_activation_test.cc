// The mlp model's declared activation memory (model.h activation_bytes)
// against what its forward_backward() really allocates: this test replaces
// the global operator new and delete to count the live bytes the plugin
// asks for during one pass (the plugin is loaded into this process, so its
// allocations come here too), and compares the peak with the declaration.
// With 16-bit views (parameters, gradients and inputs) the pass allocates
// exactly what the model declares; with fp32 views it needs no fp32 copies
// and allocates that much less.
#include <dscore/model.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace {

// Live and peak bytes requested through operator new, each block carrying
// its size in a header just before what the caller sees.
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
constexpr size_t kHeader = alignof(std::max_align_t);

void* counted_alloc(size_t size) {
  void* block = std::malloc(size + kHeader);
  if (block == nullptr) return nullptr;
  *static_cast<size_t*>(block) = size;
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(size)) + static_cast<int64_t>(size);
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(block) + kHeader;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  void* block = static_cast<char*>(p) - kHeader;
  g_live.fetch_sub(static_cast<int64_t>(*static_cast<size_t*>(block)));
  std::free(block);
}

}  // namespace

void* operator new(size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace dscore::testing {
namespace {

// Hooks that lend every layer's parameters and gradients (in one dtype)
// and allocate nothing themselves.
class LendingHost {
 public:
  LendingHost(const dscore_model_vtable* vt, const dscore_model* model, dscore_dtype dtype) {
    const dscore_model_description* d = nullptr;
    EXPECT_EQ(vt->describe(model, &d), DSCORE_OK);
    size_t index = 0;
    layers_.resize(d->layer_count);
    for (size_t l = 0; l < d->layer_count; ++l) {
      for (size_t k = 0; k < d->layers[l]->param_count; ++k, ++index) {
        const dscore_model_param* p = d->layers[l]->params[k];
        TestTensor init(DSCORE_DTYPE_F32, p->numel);
        EXPECT_EQ(vt->init_param(model, index, 0, p->numel, init.view()), DSCORE_OK);
        layers_[l].params.emplace_back(dtype, p->numel);
        layers_[l].grads.emplace_back(dtype, p->numel);
        for (int64_t e = 0; e < p->numel; ++e) layers_[l].params.back().set(e, init.get(e));
      }
    }
    for (Layer& layer : layers_) {
      for (TestTensor& t : layer.params) layer.param_ptrs.push_back(t.view());
      for (TestTensor& t : layer.grads) layer.grad_ptrs.push_back(t.view());
    }
    hooks_ = {sizeof(dscore_model_hooks), this, &acquire, &release, &grads_ready, nullptr};
  }
  const dscore_model_hooks* hooks() const { return &hooks_; }

 private:
  struct Layer {
    std::vector<TestTensor> params, grads;
    std::vector<const dscore_tensor*> param_ptrs;
    std::vector<dscore_tensor*> grad_ptrs;
  };
  static dscore_status acquire(void* ctx, size_t layer, dscore_acquire_mode mode,
                               dscore_layer_views* out) {
    Layer& l = static_cast<LendingHost*>(ctx)->layers_[layer];
    out->count = l.params.size();
    out->params = l.param_ptrs.data();
    out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? l.grad_ptrs.data() : nullptr;
    return DSCORE_OK;
  }
  static dscore_status release(void*, size_t) { return DSCORE_OK; }
  static dscore_status grads_ready(void*, size_t) { return DSCORE_OK; }

  std::vector<Layer> layers_;
  dscore_model_hooks hooks_{};
};

class MlpActivationMemory : public ::testing::Test {
 protected:
  // Widths 7 -> 9 -> 9 -> 4: the widest output (9) and the largest weight
  // (9 x 9) are not the last layer's.
  static constexpr int64_t kIn = 7, kHidden = 9, kOut = 4, kBatch = 3;

  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_MLP_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  static const dscore_model_vtable* vt() {
    return lib_->vtable<dscore_model_vtable>(DSCORE_KIND_MODEL, "mlp");
  }
  void SetUp() override {
    CreateArgs args = CreateArgs::with_defaults(lib_->find(DSCORE_KIND_MODEL, "mlp"));
    args.integer("input_dim", kIn).integer("hidden_dim", kHidden).integer("output_dim", kOut);
    args.integer("n_hidden_layers", 2);
    ASSERT_EQ(vt()->create(args.get(), &model_), DSCORE_OK) << FakeHost::instance().last_error();
  }
  void TearDown() override {
    if (model_ != nullptr) vt()->destroy(model_);
  }

  // The peak bytes one forward_backward() allocates beyond what was live.
  int64_t measured_peak(dscore_dtype dtype) {
    LendingHost host(vt(), model_, dtype);
    TestTensor x(dtype, std::vector<int64_t>{kBatch, kIn}),
        y(dtype, std::vector<int64_t>{kBatch, kOut});
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.1f * static_cast<float>(i % 7) - 0.3f);
    for (int64_t i = 0; i < y.numel(); ++i) y.set(i, 0.05f * static_cast<float>(i));
    const dscore_tensor* tensors[2] = {x.view(), y.view()};
    const dscore_batch batch{sizeof(dscore_batch), kBatch, 2, tensors};
    double loss = 0;
    const int64_t before = g_live.load();
    g_peak.store(before);
    EXPECT_EQ(vt()->forward_backward(model_, &batch, host.hooks(), 1.0, &loss), DSCORE_OK)
        << FakeHost::instance().last_error();
    EXPECT_EQ(g_live.load(), before) << "the pass kept memory";
    return g_peak.load() - before;
  }

  uint64_t declared(int64_t micro_batch, bool checkpointing) {
    uint64_t bytes = 0;
    EXPECT_EQ(vt()->activation_bytes(model_, micro_batch, checkpointing ? 1 : 0, &bytes), DSCORE_OK)
        << FakeHost::instance().last_error();
    return bytes;
  }

  static TestPluginLibrary* lib_;
  dscore_model* model_ = nullptr;
};
TestPluginLibrary* MlpActivationMemory::lib_ = nullptr;

TEST_F(MlpActivationMemory, SixteenBitPassAllocatesExactlyTheDeclaredBytes) {
  const uint64_t bytes = declared(kBatch, false);
  EXPECT_EQ(measured_peak(DSCORE_DTYPE_BF16), static_cast<int64_t>(bytes));
  EXPECT_EQ(measured_peak(DSCORE_DTYPE_BF16), static_cast<int64_t>(bytes));  // and again
  EXPECT_EQ(measured_peak(DSCORE_DTYPE_F16), static_cast<int64_t>(bytes));
}

TEST_F(MlpActivationMemory, Fp32PassNeedsNoCopies) {
  // The fp32 copies a 16-bit pass makes: the largest weight (9 x 9), the
  // widest bias (9), and the batch's x (3 x 7) and y (3 x 4).
  const int64_t copies = 4 * (kHidden * kHidden + kHidden + kBatch * (kIn + kOut));
  EXPECT_EQ(measured_peak(DSCORE_DTYPE_F32),
            static_cast<int64_t>(declared(kBatch, false)) - copies);
}

TEST_F(MlpActivationMemory, DeclaredBytesGrowWithTheMicroBatchAndIgnoreCheckpointing) {
  // The mlp has no activation checkpointing: both settings are the same.
  EXPECT_EQ(declared(kBatch, true), declared(kBatch, false));
  // Per sample: pre-activations (9 + 9 + 4), hidden activations (9 + 9),
  // dz (widest output 9), da (widest hidden input 9), the x and y copies
  // (7 + 4); the weight and bias buffers do not grow.
  EXPECT_EQ(declared(kBatch + 5, false) - declared(kBatch, false),
            uint64_t{5} * 4 * (22 + 18 + 9 + 9 + 11));
  uint64_t bytes = 0;
  EXPECT_EQ(vt()->activation_bytes(model_, 0, 0, &bytes), DSCORE_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dscore::testing
