#!/usr/bin/env python3
"""Read the wandb monitor's offline run with the wandb package's own code.

Usage: check_wandb.py WANDB_BASE CSV_DIR CONFIG_JSON PROJECT TEAM GROUP

WANDB_BASE is the folder holding `wandb/` (the "dir" of the wandb section);
CSV_DIR the csv_monitor folder of the same `dscore run` (the reference
values); CONFIG_JSON the config that run used. No network, no API key:
  - wandb.sdk.internal.datastore.DataStore scans run-<id>.wandb (header,
    block framing, CRCs) and wandb_internal_pb2.Record decodes each record;
  - records come in wandb's order: header, run, config, (history,
    summary)*, exit; the run carries project, entity = team, group and the
    run id of the folder name;
  - the config holds the written config's values;
  - history rows equal the csv_monitor rows merged per step the way
    wandb.log(..., step=global_samples) merges them, _step = the step;
    each summary repeats its row;
  - wandb's own DataStore writer frames the same records into a
    byte-identical file;
  - `wandb sync --view --sync-all` (the real CLI) finds the run and parses
    every record.
Exits non-zero with a message on the first mismatch.
"""

import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile

from wandb.proto import wandb_internal_pb2
from wandb.sdk.internal import datastore


def fail(message):
    sys.exit(f"check_wandb: FAIL: {message}")


def items(updates):
    """{key: value} of ConfigItem/HistoryItem/SummaryItem lists."""
    out = {}
    for item in updates:
        key = "/".join(item.nested_key) if item.nested_key else item.key
        out[key] = json.loads(item.value_json)
    return out


def expected_rows(csv_dir):
    """{step: {tag: value}}: the csv_monitor rows merged per step."""
    rows = {}
    for name in sorted(os.listdir(csv_dir)):
        if not name.endswith(".csv"):
            continue
        tag = "Train/Samples/" + name[len("Train_Samples_"): -len(".csv")]
        with open(os.path.join(csv_dir, name), newline="") as f:
            for r in csv.reader(f):
                if r and r[0] != "step":
                    rows.setdefault(int(r[0]), {})[tag] = float(r[1])
    return rows


def same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def scan(path):
    """The raw record payloads of a run file, read by wandb's DataStore."""
    ds = datastore.DataStore()
    ds.open_for_scan(path)
    payloads = []
    while True:
        data = ds.scan_data()
        if data is None:
            break
        payloads.append(data)
    ds.close()
    return payloads


def check_records(records, run_id, config, project, team, group, rows):
    kinds = [r.WhichOneof("record_type") for r in records]
    if kinds[:3] != ["header", "run", "config"] or kinds[-1] != "exit":
        fail(f"record order {kinds[:4]}...{kinds[-1:]}, expected header, run, config, ..., exit")
    if kinds[3:-1] != ["history", "summary"] * ((len(kinds) - 4) // 2):
        fail("between config and exit, expected history/summary pairs")
    if [r.num for r in records] != list(range(1, len(records) + 1)):
        fail("record numbers are not 1, 2, 3, ...")

    run = records[1].run
    got = (run.run_id, run.project, run.entity, run.run_group)
    if got != (run_id, project, team, group):
        fail(f"run record (id, project, entity, group) = {got}, expected {(run_id, project, team, group)}")

    stored = items(records[2].config.update)
    for key in ("train_batch_size", "train_steps", "seed"):
        if stored.get(key) != config[key]:
            fail(f"config {key} = {stored.get(key)!r}, the run's config has {config[key]!r}")
    if stored["optimizer"]["type"] != config["optimizer"]["type"] or \
            stored["optimizer"]["params"]["lr"] != config["optimizer"]["params"]["lr"]:
        fail(f"config optimizer {stored['optimizer']} does not hold {config['optimizer']}")

    history = records[3:-1:2]
    summaries = records[4:-1:2]
    if [h.history.step.num for h in history] != sorted(rows):
        fail(f"history steps {[h.history.step.num for h in history]} != csv steps {sorted(rows)}")
    for h, s in zip(history, summaries):
        step = h.history.step.num
        row = items(h.history.item)
        if row.pop("_step") != step:
            fail(f"row at step {step}: _step differs")
        if not isinstance(row.pop("_runtime"), (int, float)) or not isinstance(row.pop("_timestamp"), float):
            fail(f"row at step {step}: _runtime/_timestamp missing")
        want = rows[step]
        if sorted(row) != sorted(want) or not all(same(row[k], want[k]) for k in want):
            fail(f"row at step {step} = {row}, csv_monitor has {want}")
        if items(s.summary.update) != items(h.history.item):
            fail(f"the summary after step {step} differs from its row")
    if records[-1].exit.exit_code != 0:
        fail(f"exit code {records[-1].exit.exit_code}")
    return sum(len(r) for r in rows.values()), len(history)


def check_framing(path, payloads):
    """wandb's own writer, given the same payloads, writes the same bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "run.wandb")
        ds = datastore.DataStore()
        ds.open_for_write(copy)
        for p in payloads:
            ds._write_data(p)  # the framing step of DataStore.write(record)
        ds.close()
        if open(copy, "rb").read() != open(path, "rb").read():
            fail(f"{path} is not framed as wandb's DataStore frames the same records")


def check_wandb_sync(base, n_records):
    """The real `wandb sync`, kept offline: a dummy key gets past its login
    check and an unreachable base URL guarantees nothing is sent."""
    env = dict(os.environ, WANDB_API_KEY="0" * 40, WANDB_BASE_URL="http://127.0.0.1:9")
    env.pop("WANDB_SILENT", None)
    # --sync-all finds the run the way `wandb sync` finds unsynced runs (by
    # the offline-run-<date>_<time>-<id> folder name); --view parses every
    # record with the code that uploads them, and sends nothing.
    view = subprocess.run([sys.executable, "-m", "wandb", "sync", "--view", "--sync-all"], cwd=base, env=env,
                          capture_output=True, text=True, timeout=120)
    printed = view.stdout.count("Record: ")
    if view.returncode != 0 or "done." not in view.stdout or printed != n_records:
        fail(f"`wandb sync --view --sync-all` parsed {printed} of {n_records} records:\n{view.stdout}{view.stderr}")


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    base, csv_dir, config_path, project, team, group = sys.argv[1:]
    runs = [d for d in os.listdir(os.path.join(base, "wandb")) if d.startswith("offline-run-")]
    if len(runs) != 1:
        fail(f"expected one offline run under {base}/wandb, found {runs}")
    match = re.fullmatch(r"offline-run-\d{8}_\d{6}-([a-z0-9]{8})", runs[0])
    if not match:
        fail(f"run folder {runs[0]!r} is not named as wandb names offline runs")
    run_dir = os.path.join(base, "wandb", runs[0])
    if os.path.realpath(os.path.join(base, "wandb", "latest-run")) != os.path.realpath(run_dir):
        fail("wandb/latest-run does not point at the run")
    path = os.path.join(run_dir, f"run-{match[1]}.wandb")

    payloads = scan(path)
    records = []
    for p in payloads:
        r = wandb_internal_pb2.Record()
        r.ParseFromString(p)
        records.append(r)
    with open(config_path) as f:
        config = json.load(f)
    values, n_rows = check_records(records, match[1], config, project, team, group, expected_rows(csv_dir))
    check_framing(path, payloads)
    check_wandb_sync(base, len(records))
    print(f"check_wandb: OK: wandb's DataStore read {len(records)} records from {runs[0]}; "
          f"run/config as configured; {n_rows} history rows hold the {values} csv_monitor values; "
          f"framing byte-identical to DataStore's writer; `wandb sync --view --sync-all` finds and parses the run")


if __name__ == "__main__":
    main()
