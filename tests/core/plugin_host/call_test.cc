// The guarded call path (core/plugin_host/call.cc): how a plugin's status,
// message and escaped exceptions become a Status naming the plugin and the
// function.
#include "core/plugin_host/call.h"

#include "core/plugin_host/host_api.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <stdexcept>

namespace dscore::plugin_host {
namespace {

const std::string kPlugin = "optimizer 'x' (/p/libx.so)";

// The instance's context every call here belongs to.
HostContext& host() {
  static HostContext* context = new HostContext();
  return *context;
}

TEST(PluginCall, OkIsOk) {
  EXPECT_TRUE(call_plugin(host(), kPlugin, "step", [] { return DSCORE_OK; }).ok());
}

TEST(PluginCall, ErrorCarriesThePluginsMessage) {
  Status st = call_plugin(host(), kPlugin, "step", [] {
    return host_api()->set_error(host().handle(), DSCORE_RESOURCE_EXHAUSTED,
                                 "state buffer too small");
  });
  EXPECT_EQ(st.code(), DSCORE_RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.message(), "optimizer 'x' (/p/libx.so) step: state buffer too small");
  EXPECT_FALSE(host().take_error());  // consumed
}

TEST(PluginCall, ErrorWithoutAMessageSaysTheCode) {
  // A stale message from before the call must not be attributed to it.
  host_api()->set_error(host().handle(), DSCORE_INTERNAL, "stale");
  Status st = call_plugin(host(), kPlugin, "create", [] { return DSCORE_NOT_FOUND; });
  EXPECT_EQ(st.code(), DSCORE_NOT_FOUND);
  EXPECT_EQ(st.message(),
            "optimizer 'x' (/p/libx.so) create: failed with NOT_FOUND and no message");
}

TEST(PluginCall, StatusOutsideTheEnumIsInternal) {
  for (dscore_status garbage : {16, -1, 1234}) {
    Status st = call_plugin(host(), kPlugin, "step", [&] { return garbage; });
    EXPECT_EQ(st.code(), DSCORE_INTERNAL);
    EXPECT_EQ(st.message(), "optimizer 'x' (/p/libx.so) step returned an invalid status " +
                                std::to_string(garbage) +
                                " (not a dscore_status code; a bug in the plugin)");
  }
}

TEST(PluginCall, EscapedExceptionsBecomeInternal) {
  Status st = call_plugin(host(), kPlugin, "step",
                          []() -> dscore_status { throw std::logic_error("oops"); });
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_EQ(st.message(),
            "optimizer 'x' (/p/libx.so) threw a C++ exception out of step across the C ABI; its "
            "exported functions must catch everything (use dscore::sdk::guard from "
            "dscore/cpp/plugin.hpp); the exception said: oops");
  Status unknown = call_plugin(host(), kPlugin, "step", []() -> dscore_status { throw 42; });
  EXPECT_EQ(unknown.code(), DSCORE_INTERNAL);
  EXPECT_EQ(unknown.message().find("the exception said"), std::string::npos);
}

TEST(PluginCall, ValueCallsReturnTheValueOrTheException) {
  auto ok =
      call_plugin_value<int64_t>(host(), kPlugin, "first_iteration", [] { return int64_t{-1}; });
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, -1);
  auto bad = call_plugin_value<int64_t>(host(), kPlugin, "first_iteration",
                                        []() -> int64_t { throw std::runtime_error("no"); });
  EXPECT_EQ(bad.status().code(), DSCORE_INTERNAL);
}

TEST(PluginCall, VoidCallsLogAnEscapedExceptionInsteadOfThrowing) {
  ::testing::internal::CaptureStderr();
  call_plugin_void(host(), kPlugin, "destroy", [] { throw std::runtime_error("double free"); });
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("threw a C++ exception out of destroy"), std::string::npos) << err;
}

TEST(PluginCall, CrashRecordNamesTheInnermostCallAndIsRestored) {
  char buffer[1024];
  EXPECT_EQ(crash_message_for_test(SIGSEGV, buffer, sizeof buffer),
            "dscore: fatal signal SIGSEGV in dscore itself\n");
  {
    PluginCallScope outer("model 'gpt' (/p/libgpt.so)", "forward_backward");
    EXPECT_EQ(crash_message_for_test(SIGBUS, buffer, sizeof buffer),
              "dscore: fatal signal SIGBUS while running forward_backward of model 'gpt' "
              "(/p/libgpt.so)\n");
    {
      // A model's hook calling into a comm plugin: the inner call is the one running.
      PluginCallScope inner("comm 'mpi' (/p/libmpi.so)", "allgather");
      EXPECT_EQ(
          crash_message_for_test(SIGSEGV, buffer, sizeof buffer),
          "dscore: fatal signal SIGSEGV while running allgather of comm 'mpi' (/p/libmpi.so)\n");
    }
    EXPECT_NE(std::string(crash_message_for_test(SIGSEGV, buffer, sizeof buffer))
                  .find("forward_backward"),
              std::string::npos);
  }
  EXPECT_EQ(crash_message_for_test(SIGFPE, buffer, sizeof buffer),
            "dscore: fatal signal SIGFPE in dscore itself\n");
}

TEST(PluginCall, CrashRecordTruncatesLongNamesSafely) {
  std::string long_name(5000, 'p');
  PluginCallScope scope(long_name, "step");
  char buffer[2048];
  std::string_view message = crash_message_for_test(SIGSEGV, buffer, sizeof buffer);
  EXPECT_LT(message.size(), PluginCallScope::kRecordSize + 100);
  EXPECT_EQ(message.back(), '\n');
}

}  // namespace
}  // namespace dscore::plugin_host
