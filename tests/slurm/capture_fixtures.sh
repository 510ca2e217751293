#!/usr/bin/env bash
# Regenerates tests/fixtures/slurm/ (real sacct/squeue output for parser tests) against the running
# test cluster: it submits jobs that end up COMPLETED, FAILED, CANCELLED, TIMEOUT, REQUEUED,
# PREEMPTED, RUNNING and PENDING, and records what the client commands print. Takes about 2 minutes
# (the TIMEOUT job needs its 1-minute limit). tests/fixtures/slurm/README.md describes the files.
#
#   eval "$(tests/slurm/cluster.sh start)" && tests/slurm/capture_fixtures.sh [OUT_DIR]
set -euo pipefail

OUT=${1:-$(cd "$(dirname "$0")/../fixtures" && pwd)/slurm}
[ -n "${SLURM_CONF:-}" ] || { echo "SLURM_CONF is not set: eval \"\$(tests/slurm/cluster.sh start)\" first" >&2; exit 2; }
SACCT_FIELDS=JobID,JobName,State,ExitCode,NodeList,Start,End,Submit
# The fields and flags fsdp_orch/backends/slurm/kind.py asks for (allocations only).
BACKEND_FIELDS=JobIDRaw,JobName,State,ExitCode,Submit,Start,End,NodeList
SQUEUE_FORMAT='%i|%j|%T|%r|%P|%D|%N|%M|%l|%S'
WORK=$(mktemp -d)
JOBS=()
cleanup() {
  [ "${#JOBS[@]}" -eq 0 ] || scancel "${JOBS[@]}" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$OUT"
cd "$WORK"

# submit SBATCH_ARGS...: submit; the job id is in JOB (not echoed: JOBS must grow in this shell).
submit() {
  JOB=$(sbatch --parsable -o "$WORK/%x-%j.out" "$@")
  JOB=${JOB%%;*}
  JOBS+=("$JOB")
}

state() { squeue -h -t all -j "$1" -o %T 2>/dev/null; }

wait_state() {
  local id=$1 want=$2 deadline=$((SECONDS + ${3:-60}))
  until [[ " $want " == *" $(state "$id") "* ]]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "job $id is $(state "$id"), not $want" >&2; exit 1; }
    sleep 0.5
  done
}

# sacct is written by slurmdbd a moment after slurmctld changes a job: wait until they agree.
settle() {
  local id deadline=$((SECONDS + 30)) accounted
  for id in "$@"; do
    while accounted=$(sacct -X -n -P -j "$id" -o State | tail -n 1) \
      && [ "${accounted%% *}" != "$(state "$id")" ] && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.5
    done
  done
}

ids() { local IFS=,; echo "$*"; }

sinfo --version >"$OUT/version.txt"

# Quick ones: done within seconds.
submit -J fx-completed -N 2 --ntasks-per-node=1 --wrap 'srun hostname; srun true'
completed=$JOB
submit -J fx-failed --wrap 'exit 3'
failed=$JOB
submit -J fx-killed --wrap 'kill -9 $$'
killed=$JOB
submit -J fx-step-failed -N 2 --ntasks-per-node=1 --wrap 'srun false; true'
step_failed=$JOB
submit -J fx-cancelled --wrap 'sleep 300'
cancelled=$JOB
wait_state "$cancelled" RUNNING
scancel "$cancelled"
for id in "$completed" "$failed" "$killed" "$step_failed" "$cancelled"; do
  wait_state "$id" "COMPLETED FAILED CANCELLED"
done

# A live snapshot: a job running a step, one just requeued (pending until it may start again), one
# pending for resources.
submit -J fx-timeout --time=1 --wrap 'srun sleep 300'
timeout=$JOB
submit -J fx-requeued --wrap 'sleep 300'
requeued=$JOB
wait_state "$timeout" RUNNING
wait_state "$requeued" RUNNING
scontrol requeue "$requeued"
submit -J fx-pending -N 2 --ntasks-per-node=1 --cpus-per-task=2 --wrap 'sleep 1'
pending=$JOB
wait_state "$requeued" PENDING
wait_state "$pending" PENDING
sleep 1
squeue -h -o "$SQUEUE_FORMAT" >"$OUT/squeue-live.txt"
squeue -h -s -o '%i %j' >"$OUT/squeue-steps-live.txt"
squeue --json >"$OUT/squeue-live.json"
settle "$timeout" "$requeued" "$pending"
sacct --parsable2 --noheader -o "$SACCT_FIELDS" -j "$(ids "$timeout" "$requeued" "$pending")" >"$OUT/sacct-live.txt"
scontrol show job "$requeued" >"$OUT/scontrol-show-job-requeued.txt"

# The requeued job starts again (cred_expire, 10 s here); the time limit ends the other.
wait_state "$requeued" RUNNING 60
scancel "$requeued" "$pending"
wait_state "$timeout" TIMEOUT 150

# Preemption: a job on the urgent partition needs the whole cluster, the debug job is requeued.
whole=(-N 2 --ntasks-per-node=1 --cpus-per-task=2)
submit -J fx-preempted -p debug "${whole[@]}" --wrap 'sleep 300'
preempted=$JOB
wait_state "$preempted" RUNNING
submit -J fx-urgent -p urgent "${whole[@]}" --wrap 'sleep 5'
urgent=$JOB
wait_state "$urgent" RUNNING
settle "$preempted" "$urgent"
squeue -h -o "$SQUEUE_FORMAT" >"$OUT/squeue-preempted.txt"
sacct --parsable2 --noheader --duplicates -o "$SACCT_FIELDS" -j "$(ids "$preempted" "$urgent")" >"$OUT/sacct-preempted.txt"
wait_state "$urgent" COMPLETED 60
wait_state "$preempted" RUNNING 60
scancel "$preempted"
wait_state "$preempted" CANCELLED

all=$(ids "${JOBS[@]}")
settle "${JOBS[@]}"
squeue -h -t all -j "$all" -o "$SQUEUE_FORMAT" >"$OUT/squeue-all-ended.txt"
sacct --parsable2 --noheader -o "$SACCT_FIELDS" -j "$all" >"$OUT/sacct.txt"
sacct --parsable2 --noheader --duplicates -o "$SACCT_FIELDS" -j "$all" >"$OUT/sacct-duplicates.txt"
sacct --parsable2 --noheader -X -o "$BACKEND_FIELDS" -j "$all" >"$OUT/sacct-backend.txt"
sacct --json -j "$all" >"$OUT/sacct.json"
echo "wrote $OUT (jobs $all)" >&2
