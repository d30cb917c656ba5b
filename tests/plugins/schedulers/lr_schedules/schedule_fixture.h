// Shared fixture of the lr_schedules plugin tests: the library opened once
// per suite through the fake host, schedules created for given optimizer
// base lrs, and their points read through the C ABI exactly as the host
// reads them (point_at at the host's t).
#pragma once

#include <dscore/scheduler.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/fakes/fake_host.h"

namespace dscore::testing {

class ScheduleTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { lib_ = new TestPluginLibrary(DSCORE_LR_SCHEDULES_PLUGIN); }
  static void TearDownTestSuite() {
    delete lib_;
    lib_ = nullptr;
  }
  void SetUp() override {
    FakeHost::instance().clear_error();
    FakeHost::instance().clear_logs();
  }

  static const dscore_scheduler_vtable* vt(const char* name) {
    return lib_->vtable<dscore_scheduler_vtable>(DSCORE_KIND_SCHEDULER, name);
  }
  static CreateArgs defaults(const char* name) {
    return CreateArgs::with_defaults(lib_->find(DSCORE_KIND_SCHEDULER, name));
  }

  struct Instance {
    const dscore_scheduler_vtable* vt;
    dscore_scheduler* s;
    ~Instance() {
      if (s) vt->destroy(s);
    }
    dscore_schedule_point point(int64_t t, size_t group = 0) const {
      dscore_schedule_point p{};
      p.struct_size = sizeof p;
      EXPECT_EQ(vt->point_at(s, t, group, &p), DSCORE_OK) << FakeHost::instance().last_error();
      EXPECT_TRUE(p.set_mask & DSCORE_HPARAM_LR);
      return p;
    }
    double lr(int64_t t, size_t group = 0) const { return point(t, group).lr; }
    int64_t first_iteration() const {
      return vt->first_iteration != nullptr ? vt->first_iteration(s) : -1;
    }
  };

  // Creates `name` for an optimizer whose groups have `base_lrs`; fails the
  // test on error.
  static std::unique_ptr<Instance> make(const char* name, CreateArgs& args,
                                        std::vector<double> base_lrs = {0.5}) {
    dscore_scheduler_context ctx{sizeof ctx, base_lrs.size(), base_lrs.data(), -1};
    dscore_scheduler* s = nullptr;
    dscore_status st = vt(name)->create(args.get(), &ctx, &s);
    EXPECT_EQ(st, DSCORE_OK) << FakeHost::instance().last_error();
    return std::make_unique<Instance>(vt(name), s);
  }
  static std::string create_error(const char* name, CreateArgs& args, size_t groups = 1) {
    std::vector<double> base(groups, 0.5);
    dscore_scheduler_context ctx{sizeof ctx, groups, base.data(), -1};
    dscore_scheduler* s = nullptr;
    EXPECT_EQ(vt(name)->create(args.get(), &ctx, &s), DSCORE_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    return FakeHost::instance().last_error();
  }
  // Expects the lr (or beta1) of `group` at t = -1, 0, 1, ... to equal
  // `expected` exactly: expected[i] is the value at t = i - 1, as a value
  // read from the optimizer after the constructor and after each step().
  static void expect_trace(const Instance& s, const std::vector<double>& expected, size_t group = 0,
                           bool beta1 = false) {
    for (size_t i = 0; i < expected.size(); ++i) {
      const int64_t t = static_cast<int64_t>(i) - 1;
      const dscore_schedule_point p = s.point(t, group);
      EXPECT_EQ(beta1 ? p.beta1 : p.lr, expected[i]) << (beta1 ? "beta1" : "lr") << " at t=" << t;
    }
  }
  static bool logged(const std::string& text) {
    for (const LogLine& l : FakeHost::instance().logs())
      if (l.message.find(text) != std::string::npos) return true;
    return false;
  }
  static SchemaField field(const char* plugin, const std::string& name) {
    for (const SchemaField& f :
         parse_params_schema(lib_->find(DSCORE_KIND_SCHEDULER, plugin)->params_schema))
      if (f.name == name) return f;
    ADD_FAILURE() << plugin << " has no parameter " << name;
    return {};
  }

  static TestPluginLibrary* lib_;
};

inline TestPluginLibrary* ScheduleTest::lib_ = nullptr;

}  // namespace dscore::testing
