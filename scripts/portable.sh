#!/usr/bin/env bash
# Build a portable khlua in build-portable/: Lua, LMDB, jansson, zstd and xxhash
# linked statically, so the folder runs on a GPU host (Ubuntu 24.04, CUDA 13)
# that has none of their development packages.  libcmocka (shared only) is
# copied into build-portable/lib for the C tests.
source "$(dirname "$0")/common.sh"
kh_build build-portable -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKHLUA_PORTABLE=ON
mkdir -p "$KH_ROOT/build-portable/lib"
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 "$KH_ROOT/build-portable/lib/"
kh_log "built $KH_ROOT/build-portable/khlua; its shared libraries:"
ldd "$KH_ROOT/build-portable/khlua" | awk '{print "  " $1}' >&2
