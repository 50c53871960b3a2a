#!/usr/bin/env bash
# Set up and run the main job: installs missing Debian packages, builds khlua
# in build/, runs the quickstart (what the machine offers, a bf16 NVRTC
# compile, a dataset check), then a search: policies/plateau_switch.lua on the
# host-backend RMSNorm task with the replay provider (no API key needed; with
# ANTHROPIC_API_KEY / OPENAI_API_KEY set, those families run live).
# Extra arguments go to the policy (e.g. --rounds 10, --json). Prints where the
# best kernel and the run's report are.
source "$(dirname "$0")/common.sh"
kh_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cd "$KH_ROOT"
./build/khlua examples/quickstart.lua
echo
# the run's last line names its best kernel and its report; the best kernel is
# then written out (Solution JSON, source, figures) under .khlua/best/
rc=0
./build/khlua policies/plateau_switch.lua --task kernels/host_rmsnorm --rounds 6 "$@" || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
case " $* " in *" --json "*) exit 0 ;; esac
echo
rm -rf .khlua/best
echo "the best kernel, written out:"
./build/khlua best last --out .khlua/best
