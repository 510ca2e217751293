#!/usr/bin/env bash
# The CUDA/NCCL checks of issue 48, in one pass on a machine with one GPU (the lent device machine):
#   1. the demo on NCCL, 1 rank, bf16: a clean run, then a crash at a step and the resume, with the
#      parameter hashes compared bit for bit (again with --deterministic when they differ); step
#      time, max_memory_allocated, DCP save and load throughput
#   2. the same with offload_params: true, healthy only
#   3. the unchanged HF Trainer with --bf16 and a hang injected at a step: the verdict, the evidence
#   4. real failure lines: a CUDA out-of-memory; a rank waiting in a CUDA synchronisation (the
#      supervisor's hang rule first); an NCCL collective past its process-group timeout (NCCL's
#      watchdog first, the flight recorder's dump)
#   5. fsdp-orch fit against max_memory_allocated, where fit exists (the profile's gpu_memory makes
#      submit record fit's estimate too: each job's memory line sets it beside the measured peak)
# Each step has its own time limit and the script goes on past a failed one. Figures go to
# $OUT/summary.txt, the job folders, logs and results to $OUT/gpu-check.tar.gz.
#
#   OUT=/tmp/gpu-out bash scripts/gpu-check.sh            # on the GPU machine (python3 holds torch)
#   GPU_CHECK_DEVICE=cpu bash scripts/gpu-check.sh        # a rehearsal of the flow on a CPU, small model
#   GPU_CHECK_ONLY="3 4" bash scripts/gpu-check.sh        # only those parts
#   GPU_CHECK_NO_DETERMINISTIC=1 ...                      # no --deterministic pair in part 1
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
RESULTS=${OUT:-$REPO/gpu-check-out}  # what comes back: summary.txt and gpu-check.tar.gz
mkdir -p "$RESULTS"
PY=$(command -v "${PYTHON:-python3}") && PY=$(realpath -s "$PY")
DEVICE=${GPU_CHECK_DEVICE:-cuda}
# The device machine has torch but not fsdp-orch's own dependencies: they travel as wheels in .whl/.
WHEELS=${GPU_CHECK_WHEELS:-.whl}
if [ -d "$WHEELS" ] && ! "$PY" -c 'import pydantic, fabric, croniter, tenacity' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-check-site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/gpu-check-site
  export PATH=/tmp/gpu-check-site/bin:$PATH  # py-spy
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
SCRATCH=$(mktemp -d /tmp/gpu-check.XXXXXX)
export FSDP_ORCH_HOME=$SCRATCH/home
OUT=$SCRATCH/out  # every job's status, stderr, events and result, packed at the end
mkdir -p "$OUT"
SUMMARY=$RESULTS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
orch() { "$PY" -m fsdp_orch "$@"; }
jq_py() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {'d': d}))" "$@" 2>/dev/null; }

cat > "$SCRATCH/gpu.yaml" <<EOF
kind: local
description: the lent machine's one GPU ($DEVICE)
device: $DEVICE
gpu_memory: $([ "$DEVICE" = cuda ] && echo 140GB || echo 24GB)
EOF
CLUSTER=$SCRATCH/gpu.yaml

say "== machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")'
  nproc; } 2>&1 | tee -a "$SUMMARY"

# submit NAME LIMIT_S FOLDER [submit args...]: one job, waited for, its final status in $OUT/NAME.json
submit() {
  local name=$1 limit=$2 folder=$3; shift 3
  local began=$SECONDS
  (cd "$folder" && timeout -k 15 "$limit" "$PY" -m fsdp_orch submit --cluster "$CLUSTER" --wait --json --fresh "$@" job.yaml) \
    > "$OUT/$name.json" 2> "$OUT/$name.stderr"
  local rc=$?
  local took=$((SECONDS - began))
  local id; id=$(jq_py "$OUT/$name.json" "d['id']")
  say "-- $name: rc=$rc wall=${took}s id=${id:-?} state=$(jq_py "$OUT/$name.json" "d['state']") attempts=$(jq_py "$OUT/$name.json" "d['attempts']")"
  if [ -n "$id" ]; then
    local failures
    failures=$(jq_py "$OUT/$name.json" "'\\n'.join(f\"   failure: attempt {f['attempt']} {f['category']} ({f['action']}): {f['evidence']}\" for f in d['failures'])")
    [ -z "$failures" ] || say "$failures"
    # issue 67's words on the ending (finished, missing, notices) and the memory beside fit's estimate
    say "   finished=$(jq_py "$OUT/$name.json" "d.get('finished')") missing=$(jq_py "$OUT/$name.json" "d.get('missing')") step=$(jq_py "$OUT/$name.json" "(d['progress'] or {}).get('step')") notices=$(jq_py "$OUT/$name.json" "sorted({n['kind'] for n in d.get('events') or []})")"
    say "   memory=$(jq_py "$OUT/$name.json" "d.get('memory')")"
    orch events "$id" > "$OUT/$name.events.txt" 2>&1
    echo "$id" > "$OUT/$name.id"
  fi
  return $rc
}

demo_args() {  # the model: about 168M parameters on the GPU, the demo's own size on a CPU
  if [ "$DEVICE" = cuda ]; then
    echo "[--steps, $1, --dim, 1024, --layers, 8, --heads, 16, --vocab, 32768, --seq-len, 512, --batch-size, 8$2]"
  else
    echo "[--steps, $1, --seq-len, 32$2]"
  fi
}
demo_seq_len() { if [ "$DEVICE" = cuda ]; then echo 512; else echo 32; fi; }
demo_run() {  # NAME STEPS EXTRA_ARGS [submit args...]
  local name=$1 steps=$2 extra=$3; shift 3
  rm -rf "${SCRATCH:?}/$name" && cp -r examples/demo "$SCRATCH/$name"
  submit "$name" 240 "$SCRATCH/$name" --set procs_per_node=1 --set fsdp.mixed_precision=bf16 \
    --set "args=$(demo_args "$steps" "$extra")" --set fit.seq_len="$(demo_seq_len)" --set checkpoint.interval=40 \
    --set restart.backoff.initial=1s --set restart.backoff.jitter=0s "$@"
  local id; id=$(cat "$OUT/$name.id" 2>/dev/null)
  local result=$FSDP_ORCH_HOME/runs/$id/result.json
  if [ -f "$result" ]; then
    cp "$result" "$OUT/$name.result.json"
    local ckpt; ckpt=$(find "$SCRATCH/$name/checkpoints/demo" -maxdepth 1 -name 'step-*' 2>/dev/null | sort | tail -1)
    local bytes; bytes=$(du -sb "$ckpt" 2>/dev/null | cut -f1)
    "$PY" - "$result" "${bytes:-0}" <<'EOF' | tee -a "$SUMMARY"
import json, statistics, sys
r = json.load(open(sys.argv[1])); size = int(sys.argv[2])
saves = r["save_block_seconds"]
mem = r["max_memory_allocated"]
print(f"   final step {r['final_step']} loss {r['final_loss']:.6f} sha {r['param_sha256'][:16]} resumed_from {r['resumed_from']}")
print(f"   step time median {r['step_seconds_median'] * 1000:.1f} ms; max_memory_allocated "
      + (f"{mem / 2**30:.2f} GiB" if mem else "-"))
if saves and size:
    print(f"   DCP save: {size / 2**20:.0f} MiB per checkpoint, median {statistics.median(saves):.2f} s "
          f"({size / statistics.median(saves) / 2**30:.2f} GiB/s) over {len(saves)} saves")
if r.get("load_seconds") and size:
    print(f"   DCP load: {r['load_seconds']:.2f} s ({size / r['load_seconds'] / 2**30:.2f} GiB/s)")
EOF
  fi
  rm -rf "$SCRATCH/$name/checkpoints"
}
same_params() {  # A B: the two runs' parameter hashes
  local a b; a=$(jq_py "$OUT/$1.result.json" "d['param_sha256']"); b=$(jq_py "$OUT/$2.result.json" "d['param_sha256']")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then say "   bitwise resume check $1 vs $2: SAME"; return 0; fi
  say "   bitwise resume check $1 vs $2: DIFFERENT ($a vs $b); final loss $(jq_py "$OUT/$1.result.json" "d['final_loss']") vs $(jq_py "$OUT/$2.result.json" "d['final_loss']")"
  return 1
}

want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]; }

if want 1; then
say "== 1. the demo, NCCL, 1 rank, bf16: clean, then a crash at step 100 and the resume"
demo_run demo-clean 160 ""
demo_run demo-crash 160 "" --set env.FSDP_ORCH_FAULT=crash:step=100:rank=0
if ! same_params demo-clean demo-crash && [ -z "${GPU_CHECK_NO_DETERMINISTIC:-}" ]; then
  say "   again with --deterministic (deterministic kernels, CUBLAS_WORKSPACE_CONFIG)"
  demo_run demo-det-clean 160 ", --deterministic"
  demo_run demo-det-crash 160 ", --deterministic" --set env.FSDP_ORCH_FAULT=crash:step=100:rank=0
  same_params demo-det-clean demo-det-crash
fi

fi

if want 2; then
say "== 2. the demo with offload_params: true, healthy"
demo_run demo-offload 40 "" --set fsdp.offload_params=true

fi

if want 3; then
say "== 3. the unchanged HF Trainer, --bf16, a hang on rank 0 at step 120"
rm -rf "$SCRATCH/hf" && cp -r examples/unchanged/hf_trainer "$SCRATCH/hf"
HF_DEVICE_ARGS='--bf16'
[ "$DEVICE" = cuda ] || HF_DEVICE_ARGS='--use_cpu'
submit hf-hang 300 "$SCRATCH/hf" --set procs_per_node=1 \
  --set "args=[--output_dir, out, --max_steps, \"300\", --save_steps, \"50\", --logging_steps, \"10\", --per_device_train_batch_size, \"8\", --seq_len, \"128\", --learning_rate, \"1e-3\", $HF_DEVICE_ARGS, --report_to, none, --log_level, info]" \
  --set env.FSDP_ORCH_FAULT=hang:step=120:rank=0 --set restart.backoff.initial=1s --set restart.backoff.jitter=0s
rm -rf "$SCRATCH/hf/out"

fi

if want 4; then
say "== 4. failure lines made on purpose"
broken_job() {  # NAME SCRIPT ARGS WATCH
  mkdir -p "$SCRATCH/$1" && cp "tests/fixtures/gpu_broken/$2" "$SCRATCH/$1/"
  cat > "$SCRATCH/$1/job.yaml" <<EOF
name: $1
script: $2
args: $3
launcher: torchrun
procs_per_node: 1
restart: {max_restarts: 0}
watch: $4
EOF
}
broken_job oom cuda_oom.py "[]" "{startup_timeout: 3m}"
submit oom 120 "$SCRATCH/oom"
broken_job sync-wait nccl_timeout.py "[--steps, '40', --pg-timeout, '60', --sleep-s, '30']" "{startup_timeout: 3m}"
submit sync-wait 150 "$SCRATCH/sync-wait"
broken_job nccl-timeout nccl_timeout.py "[--steps, '40', --pg-timeout, '10', --sleep-s, '60']" \
  "{startup_timeout: 3m, hang_detection: fixed, heartbeat_timeout: 120s}"
submit nccl-timeout 150 "$SCRATCH/nccl-timeout"
id=$(cat "$OUT/nccl-timeout.id" 2>/dev/null)
say "   flight recorder dumps: $(find "$FSDP_ORCH_HOME/runs/$id" -name 'flight_recorder_rank_*' -printf '%p (%s bytes) ' 2>/dev/null)"
for name in oom sync-wait nccl-timeout; do
  id=$(cat "$OUT/$name.id" 2>/dev/null) || continue
  for log in "$FSDP_ORCH_HOME/runs/$id"/attempt-*/console-node-*.log; do
    [ -f "$log" ] || continue
    say "   diagnose $name $(basename "$(dirname "$log")"): $(orch diagnose --json "$log" 2>&1 | tr '\n' ' ' | cut -c1-600)"
  done
done

fi

if want 5; then
say "== 5. fsdp-orch fit"
if orch fit --help >/dev/null 2>&1; then
  rm -rf "$SCRATCH/fit" && cp -r examples/demo "$SCRATCH/fit"
  (cd "$SCRATCH/fit" && orch fit --cluster "$CLUSTER" --set procs_per_node=1 --set fsdp.mixed_precision=bf16 \
    --set "args=$(demo_args 160 "")" --set fit.seq_len="$(demo_seq_len)" job.yaml) 2>&1 | tee -a "$SUMMARY"
else
  say "   fsdp-orch fit does not exist in this tree: not run"
fi

fi

# Everything but checkpoints and model files, for reading back here.
tar -C "$SCRATCH" --exclude='checkpoints' --exclude='hf/out' --exclude='*.pt' --exclude='*.safetensors' \
  --exclude='*.distcp' -czf "$RESULTS/gpu-check.tar.gz" . 2>/dev/null
say "== done"
