#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A rank of an MPI job stops (SIGSTOP: alive, silent) or dies (SIGKILL); the job must
# end within its deadline with the error reported, not spin or wait forever. One
# exception, of the launcher's making: when a rank is stopped during MPI_Init, Open MPI
# 4.1's mpirun may deadlock after every rank has ended (seen under load: a futex wait,
# its ranks never reaped). There the ranks' end is what is checked, and mpirun is killed.
#   mpi_stop.sh MPIRUN TRAIN_BINARY [TRAIN_ARGS...]
# Cases: a rank stopped while training, a rank stopped during MPI_Init, a rank killed
# while training. Prints one line per case with the seconds the job took to end.
# Exits 77 (skipped) without mpirun.
set -u
mpirun=$1 train=$2
shift 2
command -v "$mpirun" >/dev/null 2>&1 || { echo "no mpirun: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
deadline_ms=3000  # --timeout: the channel's and every collective's deadline
slack_s=30        # startup, the deadline itself, MPI_Abort's teardown
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failures=0

# all_ended PID: no process mpirun started is alive (exited, reaped or not). Asked only
# after a rank was signalled, so there were some.
all_ended() { ! ps -o stat= --ppid "$1" 2>/dev/null | grep -qv '^Z'; }

# ranks PID...: the MPI processes mpirun started (its children running the binary).
# Matched by process name, which changes only at exec: a child mpirun has forked but not
# yet exec'd still carries mpirun's command line (it names the binary), and stopping it
# there holds mpirun itself, which waits for the exec, rather than a rank in MPI_Init.
ranks() { pgrep -P "$1" -x "$(basename "$train" | cut -c1-15)" | sort -n; }

run_case() {  # name signal when(init|train)
  local name=$1 sig=$2 when=$3
  [[ -n ${DISAGMOE_MPI_CASES:-} && $name != *${DISAGMOE_MPI_CASES}* ]] && return
  local start end rc victim=""
  start=$(date +%s%N)
  "$mpirun" -np 4 --oversubscribe "$train" "${extra[@]}" --schedule afpipe --transport mpi --steps 100000 \
      --timeout "$deadline_ms" >"$log" 2>&1 &
  local job=$!
  if [[ $when == init ]]; then  # stop the first rank as soon as it exists
    for _ in $(seq 1 2000); do victim=$(ranks "$job" | head -n 1); [[ -n $victim ]] && break; sleep 0.005; done
  else  # wait until training runs (the first line is printed after MPI_Init), then stop one rank
    for _ in $(seq 1 600); do [[ -s $log ]] && break; sleep 0.1; done
    sleep 1
    victim=$(ranks "$job" | tail -n 1)
  fi
  [[ -n $victim ]] && kill -s "$sig" "$victim"
  # Wall-clock limits (the polling itself takes time under load).
  local now limit=$((start + (deadline_ms / 1000 + slack_s) * 1000000000)) ended=0 launcher=""
  while kill -0 "$job" 2>/dev/null; do
    now=$(date +%s%N)
    if all_ended "$job"; then (( ended == 0 )) && ended=$now; else ended=0; fi
    (( now >= limit || (ended > 0 && now - ended >= 5000000000) )) && break
    sleep 0.2
  done
  if [[ $when == init ]] && (( ended > 0 )) && kill -0 "$job" 2>/dev/null; then
    kill -KILL "$job" 2>/dev/null  # the launcher's deadlock (file comment)
    launcher=" (every rank ended; mpirun did not, and was killed)"
  fi
  if [[ -z $launcher ]] && kill -0 "$job" 2>/dev/null; then
    echo "FAIL $name: the job still runs $(( ($(date +%s%N) - start) / 1000000000 )) s after it started (victim $victim$( (( ended > 0 )) && echo ", every rank ended"))"
    echo "  its log: $(head -c 600 "$log" | tr '\n' ' ')"
    echo "  mpirun: $(ps -o pid=,stat=,wchan:32= -p "$job" 2>/dev/null); its processes: $(ps -o pid=,stat=,wchan:24=,etime=,args= --ppid "$job" 2>/dev/null | cut -c1-120 | tr '\n' ' ')"
    kill -KILL "$job" $(ranks "$job") 2>/dev/null
    failures=$((failures + 1))
    return
  fi
  wait "$job"
  rc=$?
  end=$(date +%s%N)
  [[ -n $launcher ]] && end=$ended  # when the ranks had ended
  [[ -n $victim ]] && kill -KILL "$victim" 2>/dev/null
  local secs
  secs=$(awk -v ns=$((end - start)) 'BEGIN { printf "%.1f", ns / 1e9 }')
  if (( rc == 0 )) || [[ -z $victim ]]; then
    echo "FAIL $name: exit $rc, victim '${victim}': $(head -c 400 "$log" | tr '\n' ' ')"
    failures=$((failures + 1))
  elif [[ $sig == STOP ]] && ! grep -q "^disagmoe-train: error: \|^error: MPI_Init" "$log"; then
    # A stopped rank cannot speak; the others must say why the job ends. A killed
    # rank's job is ended by mpirun itself.
    echo "FAIL $name: exit $rc without an error line: $(head -c 400 "$log" | tr '\n' ' ')"
    failures=$((failures + 1))
  else
    echo "ok $name: job ended in ${secs} s (exit $rc)${launcher}: $(grep -m1 "error: \|aborted" "$log" | cut -c1-240)"
  fi
}

extra=("$@")
set --
run_case "SIGSTOP while training" STOP train
run_case "SIGSTOP during MPI_Init" STOP init
run_case "SIGKILL while training" KILL train
exit $(( failures > 0 ))
