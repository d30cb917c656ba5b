// A training worker for the multi-rank tests, run under mpirun: trains from
// a config through dscore's embedding API (the same pieces `dscore run`
// uses) and writes what the tests compare, per rank, to <out>.rank<R>:
//   loss <step> <global mean loss, hex float>
//   step <step> applied|skipped <loss scale> <global gradient norm>
//   memory <parameters> <gradients> <master> <optimizer> <buffers>   (bytes, counted)
//   plan   <parameters> <gradients> <master> <optimizer> <buffers>
//   comm <op> <calls> <elements>                  (after the first step, over the rest)
//   numel <Psi>
//   wire <step> <payload bytes this rank has sent so far (the backend's counter)>
// and rank 0 the gathered fp32 master weights to <out>.params (raw floats:
// the whole model's, joined from every tensor-parallel part and pipeline
// stage). Under a pipeline each step is one train_batch (the stage's
// schedule over the micro-batches).
// Fault injection for the fault tests: --die-rank/--die-step (SIGKILL),
// --hang-rank/--hang-step (sleep forever), --poison-rank/--poison-step (an
// Inf in that rank's batch, as an fp16 overflow on one rank only).
// Checkpoints: --load DIR[,DIR...] (resume from DIR's latest before
// training; the loop goes on from the loaded step; several: one run each,
// reloading into the same engine, outputs of the i-th (i > 0) as <out>.<i>), --load-weights-only,
// --save DIR with
// --save-step K (save once K steps are done) and --stop-after-save (exit
// at once, as if killed), --save-error-ok (report a failed save and go on);
// --dump-state: rank 0 writes the gathered fp32 masters and every optimizer
// slot to <out>.state (at the save with --save, else after loading) as
// "<name> <count>\n" + raw floats per array.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/sigterm_report.h"
#include "core/data/sampler.h"
#include "core/data/source.h"
#include "core/engine/engine_testing.h"
#include "core/engine/initialize.h"

namespace {

struct Options {
  std::string config, out;
  int die_rank = -1, die_step = -1, hang_rank = -1, hang_step = -1, poison_rank = -1,
      poison_step = -1;
  std::string load, save;
  int save_step = -1;
  bool load_weights_only = false, stop_after_save = false, save_error_ok = false,
       dump_state = false;
};

bool flag(const std::string& k, Options* o) {
  if (k == "--load-weights-only")
    o->load_weights_only = true;
  else if (k == "--stop-after-save")
    o->stop_after_save = true;
  else if (k == "--save-error-ok")
    o->save_error_ok = true;
  else if (k == "--dump-state")
    o->dump_state = true;
  else
    return false;
  return true;
}

// Rank 0 writes the gathered masters and optimizer slots (collective).
bool dump_state(dscore::Engine& e, const std::string& path) {
  std::vector<std::pair<std::string, std::vector<float>>> arrays(1);
  arrays[0].first = "fp32";
  if (!dscore::EngineTesting::gather_parameters(e, &arrays[0].second).ok()) return false;
  const auto slots = dscore::EngineTesting::optimizer_state_slots(e);
  for (size_t k = 0; k < slots.size(); ++k) {
    arrays.emplace_back(slots[k].name, std::vector<float>());
    if (!dscore::EngineTesting::gather_optimizer_state(e, k, &arrays.back().second).ok())
      return false;
  }
  if (e.rank() != 0) return true;
  std::ofstream raw(path, std::ios::binary);
  for (const auto& [name, values] : arrays) {
    raw << name << " " << values.size() << "\n";
    raw.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(values.size() * 4));
  }
  return static_cast<bool>(raw);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "zero_worker: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    if (flag(argv[i], &o)) {
      --i;
      continue;
    }
    if (i + 1 >= argc) return fail(std::string("option ") + argv[i] + " needs a value");
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config")
      o.config = v;
    else if (k == "--load")
      o.load = v;
    else if (k == "--save")
      o.save = v;
    else if (k == "--save-step")
      o.save_step = std::stoi(v);
    else if (k == "--out")
      o.out = v;
    else if (k == "--die-rank")
      o.die_rank = std::stoi(v);
    else if (k == "--die-step")
      o.die_step = std::stoi(v);
    else if (k == "--hang-rank")
      o.hang_rank = std::stoi(v);
    else if (k == "--hang-step")
      o.hang_step = std::stoi(v);
    else if (k == "--poison-rank")
      o.poison_rank = std::stoi(v);
    else if (k == "--poison-step")
      o.poison_step = std::stoi(v);
    else
      return fail("unknown option " + k);
  }
  dscore::InitializeOptions init = dscore::options_with_environment();
  init.trust_config_plugin_paths = true;  // the build's plugin folder, outside the config's
  auto setup = dscore::prepare(o.config, init);
  if (!setup.ok()) return fail(setup.status().message());
  if (!setup->loaded.ok()) return fail(dscore::format_config_errors(setup->loaded));
  auto engine = dscore::build_engine(*setup, nullptr);
  if (!engine.ok()) return fail(engine.status().message());
  dscore::Engine& e = **engine;
  if (e.world_size() > 1)
    dscore::comm::install_sigterm_report(e.communicator());  // as `dscore run` does
  // As `dscore run` does: a failure on one rank ends every rank.
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "zero_worker: %s\n", message.c_str());
    if (e.world_size() > 1) e.abort(message);
    return 1;
  };
  const auto& cfg = e.config();
  auto source = dscore::data::make_batch_source(cfg, e.model());
  if (!source.ok()) return fail(source.status().message());
  // The ranks of one tensor-parallel group (or pipeline) read the same samples.
  dscore::data::DistributedSampler sampler(cfg.batch, e.data_parallel_size(),
                                           e.data_parallel_rank());
  dscore::data::HostBatch batch(e.model().description(), cfg.batch.train_micro_batch_size_per_gpu);
  // A pipeline stage keeps one batch per activation buffer in flight.
  std::vector<std::unique_ptr<dscore::data::HostBatch>> pipe_batches;
  for (int b = 0; e.pipelined() && b < e.pipe_buffers(); ++b)
    pipe_batches.push_back(std::make_unique<dscore::data::HostBatch>(
        e.model().description(), cfg.batch.train_micro_batch_size_per_gpu));

  // One training run per --load entry (comma-separated; outputs of entry i
  // > 0 go to <out>.<i>.*), each from the checkpoint it loads.
  auto train = [&](const std::string& load_dir, const std::string& prefix) -> int {
    if (!load_dir.empty()) {
      dscore::LoadCheckpointOptions load;
      load.load_optimizer_states = !o.load_weights_only;
      if (auto st = e.load_checkpoint(load_dir, load); !st.ok()) return fail(st.status().message());
    }
    if (o.dump_state && o.save.empty() && !dump_state(e, prefix + ".state"))
      return fail("cannot dump the state");
    std::ofstream out(prefix + ".rank" + std::to_string(e.rank()));
    out << "numel " << e.layout().total_numel() << "\n";
    for (int64_t step = e.global_steps(); step < cfg.train_steps; ++step) {
      if (step == o.save_step && !o.save.empty()) {
        const dscore::Status saved = e.save_checkpoint(o.save);
        if (!saved.ok() && !o.save_error_ok) return fail(saved.message());
        if (!saved.ok())
          std::fprintf(stderr, "zero_worker: save failed, training goes on: %s\n",
                       saved.message().c_str());
        if (o.dump_state && !dump_state(e, prefix + ".state")) return fail("cannot dump the state");
        if (o.stop_after_save) return 0;
      }
      if (e.rank() == o.die_rank && step == o.die_step) raise(SIGKILL);
      if (e.rank() == o.hang_rank && step == o.hang_step)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      if (e.pipelined()) {  // the stage's schedule over the micro-batches, then the update
        auto load = [&](int64_t micro, int buffer) -> dscore::Result<const dscore_batch*> {
          dscore::data::HostBatch& b = *pipe_batches[static_cast<size_t>(buffer)];
          DSCORE_RETURN_IF_ERROR((*source)->fill(sampler.micro_batch(step, micro), &b));
          return &b.view();
        };
        if (auto loss = e.train_batch(load); !loss.ok()) return fail(loss.status().message());
      }
      for (int64_t micro = 0; !e.pipelined() && micro < cfg.batch.gradient_accumulation_steps;
           ++micro) {
        if (auto st = (*source)->fill(sampler.micro_batch(step, micro), &batch); !st.ok())
          return fail(st.message());
        if (e.rank() == o.poison_rank && step == o.poison_step)
          static_cast<float*>(batch.tensor(0).data)[0] = INFINITY;
        if (auto loss = e.forward_backward(batch.view()); !loss.ok())
          return fail(loss.status().message());
        if (auto st = e.step(); !st.ok()) return fail(st.message());
      }
      char hex[64];
      std::snprintf(hex, sizeof hex, "%a", e.last_loss());
      out << "loss " << step << " " << hex << "\n";
      out << "step " << step << " " << (e.was_step_applied() ? "applied" : "skipped") << " "
          << e.loss_scale() << " " << e.get_global_grad_norm() << "\n";
      if (step == 0) e.communicator().reset_counters();  // volume per step, setup excluded
      if (auto wire = e.communicator().wire_counters(); wire.ok())
        out << "wire " << step << " " << wire->bytes_sent << "\n";
    }
    for (const auto& [op, c] : e.communicator().counters())
      out << "comm " << op << " " << c.calls << " " << c.elements << "\n";
    const auto m = e.measured_memory(), p = e.plan().memory;
    out << "memory " << m.parameters << " " << m.gradients << " " << m.master << " " << m.optimizer
        << " " << m.buffers << " " << m.offload_tiles << "\n";
    out << "plan " << p.parameters << " " << p.gradients << " " << p.master << " " << p.optimizer
        << " " << p.buffers << " " << p.offload_tiles << "\n";
    std::vector<float> params;
    if (auto st = dscore::EngineTesting::gather_parameters(e, &params); !st.ok())
      return fail(st.message());
    if (e.rank() == 0) {
      std::ofstream raw(prefix + ".params", std::ios::binary);
      raw.write(reinterpret_cast<const char*>(params.data()),
                static_cast<std::streamsize>(params.size() * 4));
    }
    return 0;
  };
  std::vector<std::string> loads;
  for (size_t start = 0;;) {
    const size_t comma = o.load.find(',', start);
    loads.push_back(
        o.load.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (size_t i = 0; i < loads.size(); ++i)
    if (int rc = train(loads[i], i == 0 ? o.out : o.out + "." + std::to_string(i)); rc != 0)
      return rc;
  return 0;
}
