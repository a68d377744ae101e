#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A program whose standard output cannot be written (/dev/full: every write fails with
# ENOSPC) must exit 2 with one line naming stdout, not report success.
#   stdout_full.sh PROGRAM ARGS...
set -u
[ -w /dev/full ] || { echo "skipped: no /dev/full"; exit 77; }
err=$("$@" 2>&1 >/dev/full)
rc=$?
lines=$(printf '%s\n' "$err" | grep -c .)
if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! printf '%s\n' "$err" | grep -q 'stdout = "write failed"'; then
  echo "FAIL: $* > /dev/full: exit $rc, stderr: $err"
  exit 1
fi
echo "ok: $* > /dev/full: exit 2, $err"
