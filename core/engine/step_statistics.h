// The accumulation boundary's statistics, identical on every rank: each
// rank sums the squares of its gradient share (zero_strategy.h
// gradient_share) on the compute stream, next to its loss; the comm stream
// gathers every rank's record once that is done; the host merges them in
// rank order. Device memory throughout, so the same code runs where the
// gradients are on a GPU and the collective is NCCL's; the host reads the
// gathered records once, at the end.
#pragma once

#include <dscore/plugin.h>

#include <memory>

#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/device/device.h"
#include "core/device/ops.h"
#include "core/tensor/square_sum.h"
#include "core/zero/zero_strategy.h"

namespace dscore {

class StepStatistics {
 public:
  // Buffers for a job of `world` ranks on `device`.
  static Result<std::unique_ptr<StepStatistics>> create(device::Device& device, int world);

  struct Totals {
    tensor::SquareSum squares;  // every rank's share merged in rank order
    double loss_sum = 0;        // the ranks' losses summed in rank order
  };
  // `compute` runs the sum (as `target`), then `comm` gathers; blocks until
  // the gathered records are on the host. The gradients must be complete
  // on `comm` (the engine's end_micro_step). `shares`: the rank's gradient
  // shares (ZeroStrategy::gradient_shares), summed in order.
  Result<Totals> gather(const std::vector<zero::GradientShare>& shares, dscore_dtype grad_dtype,
                        double loss, device::Stream& compute, device::ops::Target target,
                        device::Stream& comm, comm::Communicator& communicator);

 private:
  // One rank's record, as it lies in memory and travels.
  struct Record {
    device::ops::SquareSumResult squares;
    double loss = 0;
  };
  static_assert(sizeof(Record) == 32, "Record travels as raw bytes");

  StepStatistics(device::Device& device, int world) : device_(device), world_(world) {}

  device::Device& device_;
  int world_;
  device::Buffer mine_;       // kDevice: this rank's Record
  device::Buffer gathered_;   // kDevice: world Records
  device::Buffer workspace_;  // kDevice: sum_squares scratch
  device::Buffer host_;       // kPinned: world Records read back, then this rank's loss
};

}  // namespace dscore
