#!/usr/bin/env python3
"""Load the tensorboard monitor's event file with TensorBoard's own reader.

Usage: check_tensorboard.py LOGDIR CSV_DIR

LOGDIR is output_path/job_name of the "tensorboard" section; CSV_DIR the
csv_monitor folder of the same `dscore run`, whose rows are the reference
values (docs/deepspeed-reference.md#monitors: one file per tag, rows "global_samples,value").
Checks, with tensorboard's EventAccumulator:
  - the event file is named events.out.tfevents.<10-digit seconds>.<host>.<pid>.<uid>;
  - it declares file_version brain.Event:2;
  - its scalar tags are exactly the csv_monitor's tags;
  - every tag has the csv rows' steps in order, and values equal to the csv
    values rounded to float32 (TensorBoard's simple_value);
  - a copy with one flipped byte loads fewer events (the reader checks the
    CRCs, so the full load above also proves the CRCs right).
Exits non-zero with a message on the first mismatch.
"""

import csv
import math
import os
import re
import shutil
import socket
import struct
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def fail(message):
    sys.exit(f"check_tensorboard: FAIL: {message}")


def csv_rows(csv_dir):
    """{file stem: [(step, value)]} from the csv_monitor files."""
    out = {}
    for name in sorted(os.listdir(csv_dir)):
        if not name.endswith(".csv"):
            continue
        with open(os.path.join(csv_dir, name), newline="") as f:
            rows = [r for r in csv.reader(f) if r and r[0] != "step"]
        out[name[: -len(".csv")]] = [(int(step), float(value)) for step, value in rows]
    return out


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def load(logdir):
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})  # 0 = keep every event
    acc.Reload()
    return acc


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    logdir, csv_dir = sys.argv[1], sys.argv[2]
    files = sorted(os.listdir(logdir))
    if len(files) != 1:
        fail(f"expected one event file in {logdir}, found {files}")
    pattern = r"events\.out\.tfevents\.\d{10}\." + re.escape(socket.gethostname()) + r"\.\d+\.\d+"
    if not re.fullmatch(pattern, files[0]):
        fail(f"event file name {files[0]!r} is not SummaryWriter's pattern")

    acc = load(logdir)
    if acc.file_version != 2.0:
        fail(f"file_version is {acc.file_version}, expected 2 (brain.Event:2)")
    expected = csv_rows(csv_dir)
    tags = acc.Tags()["scalars"]
    by_stem = {t.replace("/", "_").replace(" ", "_"): t for t in tags}
    if sorted(by_stem) != sorted(expected):
        fail(f"tags {sorted(tags)} do not match the csv files {sorted(expected)}")

    count = 0
    for stem, rows in expected.items():
        tag = by_stem[stem]
        events = acc.Scalars(tag)
        got = [(e.step, e.value) for e in events]
        want = [(step, float32(value)) for step, value in rows]
        if len(got) != len(want):
            fail(f"{tag}: {len(got)} events, csv_monitor has {len(want)}")
        for (gs, gv), (ws, wv) in zip(got, want):
            if gs != ws or not same(gv, wv):
                fail(f"{tag}: event (step {gs}, {gv!r}) != csv (step {ws}, {wv!r})")
        walls = [e.wall_time for e in events]
        if walls != sorted(walls):
            fail(f"{tag}: wall times go backwards")
        count += len(got)

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, files[0])
        shutil.copy(os.path.join(logdir, files[0]), copy)
        data = bytearray(open(copy, "rb").read())
        data[len(data) // 2] ^= 0x01
        open(copy, "wb").write(bytes(data))
        corrupt = load(tmp)
        loaded = sum(len(corrupt.Scalars(t)) for t in corrupt.Tags()["scalars"])
        if loaded >= count:
            fail("a flipped byte went unnoticed: TensorBoard's reader did not check the CRCs")

    print(f"check_tensorboard: OK: EventAccumulator read {count} scalars of {len(tags)} tags "
          f"({', '.join(sorted(tags))}) from {files[0]}, equal to the csv_monitor rows as float32; "
          f"a corrupted copy stops at the bad record ({loaded} of {count} scalars)")


if __name__ == "__main__":
    main()
