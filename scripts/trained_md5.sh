#!/usr/bin/env bash
# The md5 of the parameters a small GPT trains to under every placement a
# refactor must keep bitwise: ZeRO stages 0-3 x fp32/bf16 (fp16 at stage 2)
# x no offload / ZeRO-Offload (cpu) / optimizer state on NVMe / stage 3's
# parameters on NVMe, on 1 and 2 ranks, with gradient accumulation. Each
# run trains 6 steps, saves a checkpoint, and `dscore zero-to-fp32` writes
# its fp32 weights; the line is "<md5>  <case>". Run it before and after a
# change and diff the two outputs:
#   bash scripts/trained_md5.sh [build/release/bin/dscore] > before.txt
set -euo pipefail
cd "$(dirname "$0")/.."
dscore=$(realpath "${1:-build/release/bin/dscore}")
data=$(realpath configs/data/quickstart.txt)
work=$(mktemp -d /tmp/dscore-md5.XXXXXX)
trap 'rm -rf "$work"' EXIT

run_case() {  # name ranks precision zero_json
  local name=$1 ranks=$2 precision=$3 zero=$4
  local dir=$work/$name
  mkdir -p "$dir"
  cat > "$dir/config.json" <<JSON
{
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 100,
  $precision
  "zero_optimization": $zero,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}},
  "model": {"type": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16,
            "vocab_size": 256},
  "data": {"type": "text", "path": "$data"},
  "train_steps": 6,
  "checkpoint_dir": "$dir/ckpt",
  "save_interval": 6,
  "seed": 7
}
JSON
  if ! "$dscore" run -n "$ranks" --config "$dir/config.json" > "$dir/run.log" 2>&1; then
    echo "FAILED  $name: $(grep -m1 error "$dir/run.log")"; return
  fi
  "$dscore" zero-to-fp32 "$dir/ckpt" "$dir/out" > /dev/null 2>&1
  echo "$(cat "$dir"/out/*.safetensors | md5sum | cut -d' ' -f1)  $name"
}

fp32='' bf16='"bf16": {"enabled": true},' fp16='"fp16": {"enabled": true, "initial_scale_power": 8},'
for ranks in 1 2; do
  for stage in 0 1 2 3; do
    extra=''
    [ "$stage" = 3 ] && extra=', "stage3_param_persistence_threshold": 64, "stage3_prefetch_bucket_size": 4096'
    for p in fp32 bf16; do
      run_case "z$stage-$p-n$ranks" "$ranks" "${!p}" "{\"stage\": $stage$extra}"
      [ "$stage" = 0 ] && continue
      run_case "z$stage-$p-cpu-n$ranks" "$ranks" "${!p}" \
        "{\"stage\": $stage$extra, \"offload_optimizer\": {\"device\": \"cpu\"}}"
      run_case "z$stage-$p-nvme-n$ranks" "$ranks" "${!p}" \
        "{\"stage\": $stage$extra, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$work/swap\"}}"
    done
  done
  run_case "z2-fp16-n$ranks" "$ranks" "$fp16" '{"stage": 2}'
  run_case "z3-bf16-param-nvme-n$ranks" "$ranks" "$bf16" \
    "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$work/swap\"}}"
  run_case "z3-bf16-param-cpu-n$ranks" "$ranks" "$bf16" \
    '{"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}'
  run_case "z3-fp32-partial-n$ranks" "$ranks" "$fp32" \
    '{"stage": 3, "sub_group_size": 4096, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}'
done
