# common.sh: sourced by the scripts in this folder.  Installs the Debian
# packages khlua needs when they are missing (apt-get; sudo when not root)
# and configures + builds a build folder.
set -euo pipefail

KH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# chromium: the compare report's render test (tests/lua/test_compare_render.lua)
KH_PACKAGES="cmake make gcc pkg-config python3 liblua5.4-dev libjansson-dev libcurl4-openssl-dev
  liblmdb-dev lmdb-utils libzstd-dev libxxhash-dev libcmocka-dev chromium"
# tests/lua/test_slurm.lua starts a private single-node Slurm cluster
KH_PACKAGES="$KH_PACKAGES slurm-wlm munge"

kh_log() { printf '[khlua] %s\n' "$*" >&2; }

kh_install_deps() {
  local missing=()
  for p in $KH_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  kh_log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

kh_check_cuda() {
  if [ ! -f "$CUDA_HOME/include/cuda.h" ] || [ ! -f "$CUDA_HOME/include/nvrtc.h" ]; then
    kh_log "the CUDA 13 toolkit is needed (headers under CUDA_HOME=$CUDA_HOME); set CUDA_HOME"
    exit 1
  fi
}

# kh_build DIR [cmake options...]
kh_build() {
  local dir=$1; shift
  kh_install_deps
  kh_check_cuda
  kh_log "configuring $dir $*"
  cmake -S "$KH_ROOT" -B "$KH_ROOT/$dir" -DCUDA_HOME="$CUDA_HOME" "$@" >/dev/null
  kh_log "building $dir"
  cmake --build "$KH_ROOT/$dir" -j"$(nproc)" >/dev/null
}
