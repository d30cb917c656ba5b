"""Writes train_schedule_golden.txt: DeepSpeed's pipeline TrainSchedule (1F1B), every step's
instructions for every stage, for the shapes schedule_test.cc checks dscore's schedule against.

Usage (the venv of tests/external/deepspeed): python train_schedule_golden.py > train_schedule_golden.txt
"""
import deepspeed
from deepspeed.runtime.pipe.schedule import TrainSchedule

SHAPES = [(1, 1), (1, 3), (2, 1), (2, 2), (2, 4), (3, 5), (4, 2), (4, 4), (4, 8), (5, 3)]

print("# DeepSpeed %s TrainSchedule: stages micro_batches stage step: instructions" %
      deepspeed.__version__)
for stages, micro_batches in SHAPES:
    for stage in range(stages):
        schedule = TrainSchedule(micro_batches=micro_batches, stages=stages, stage_id=stage)
        print("%d %d %d buffers: %d" % (stages, micro_batches, stage, schedule.num_pipe_buffers()))
        for step, cmds in enumerate(schedule.steps()):
            print("%d %d %d %d: %s" % (stages, micro_batches, stage, step,
                                       " ".join(repr(c) for c in cmds)))
