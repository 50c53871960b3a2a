#!/usr/bin/env bash
# Set up and run every test: installs missing Debian packages, builds with
# AddressSanitizer + UndefinedBehaviorSanitizer and -Werror in build-test/,
# then runs ctest (GPU tests report "skipped" where there is no GPU).
# Extra arguments go to ctest (e.g. -L unit, -R store).
source "$(dirname "$0")/common.sh"
kh_build build-test -DCMAKE_BUILD_TYPE=Debug -DKHLUA_SANITIZE=ON -DKHLUA_WERROR=ON
cd "$KH_ROOT/build-test"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --output-on-failure --timeout 900 "$@"
