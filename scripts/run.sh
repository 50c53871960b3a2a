#!/usr/bin/env bash
# Set up and run the main job: installs missing Debian packages, builds
# khlua in build/, and runs the quickstart (arguments go to the script).
source "$(dirname "$0")/common.sh"
kh_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cd "$KH_ROOT"
exec ./build/khlua examples/quickstart.lua "$@"
