#!/usr/bin/env bash
# Issue 27, final hostile pass: the command line's messages that do not say what is wrong.
# Run from the repository root after `npm ci`:  bash test/hostile/issue27-final/cli-messages.sh
set -u
root=$(pwd); dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export PATH=$root/node_modules/.bin:$PATH
run() { node "$root/bin/effect-gym.js" run --dataset "$root/examples/frozen_lake.jsonl" --env frozen_lake --policy random "$@" 2>&1 | tail -1; }
echo "1. --step-timeout 2e9 (a number > 0; the cap of 1e9 s is in no message, and Rollout.make takes timeouts.step 1e300):"
run --output "$dir/a.jsonl" --step-timeout 2e9
echo "2. --output in a folder that does not exist (names a temporary file of the run record, not the missing folder):"
run --output "$dir/no/such/folder/a.jsonl"
