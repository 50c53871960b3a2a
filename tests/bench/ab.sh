#!/usr/bin/env bash
# ab.sh: two commits of khlua side by side on this machine, for "the
# benchmarks are not slower than before the change".  Each ref is checked out
# in a detached worktree under a temp folder and built there in Release
# without sanitizers (khlua, bench_store, bench_compile only); then, round by
# round, every benchmark runs for both builds back to back, A B in odd rounds
# and B A in even ones (AB_ORDER=ab: always A B), so both see the same load
# and a load that rises or falls during the run does not favour either:
#   store       bench_store RECORDS BATCH: batched record writes/s, blob put
#               and get MB/s, indexed query p50/p99 (and its raw-LMDB anchor,
#               the same code in both builds: a noise control)
#   compile     bench_compile on the corpus (--reps, --nvcc-reps, --khlua that
#               build's khlua): per-category warm, server and store p50s, the
#               cache hit p50 (and nvcc, the same binary for both: a control)
#   turnaround  wall time and CPU time (user + sys, the process and its
#               workers) of `khlua eval` of kernels/host_rmsnorm's baseline
#               (definition.json khlua.baseline; a fresh store each run) with
#               a fixed amount of work: --protocol official --warmup 1
#               --iters 10 --timing-trials 1 --seed 1 (AB_EVAL_ARGS).  Not
#               --protocol screen: it times until the confidence interval is
#               narrow enough, so its number of timed calls (10 to 200 per
#               workload, each after a 320 MiB cache flush) follows the
#               machine's noise, not the build.  The timed calls are counted
#               and shown: a timed call that waited on the run queue is taken
#               again (hostbench.c), so under load the work still grows.
#               Then the same eval with --no-timing --seed 1 (correctness
#               alone: fixed work, the harness's own cost) and `khlua task
#               check kernels/host_rmsnorm`, the median of 5 each per round.
#               Each build runs its own checkout's package.  Host backend.
#   bench_timing needs a GPU: not run here (said in the output).
# Prints a table: metric, median of A, median of B, B/A, which direction is
# better, and a flag where B is more than 10% worse; the commits, the
# machine (nproc, load average before and after), the date.
#   bash tests/bench/ab.sh REF_A REF_B [--reps N] [--out FILE]
# Environment: AB_STORE_ARGS ("200000 10000"), AB_COMPILE_REPS (3),
# AB_EVAL_ARGS (above), AB_ORDER (abba or ab),
# AB_NVCC_REPS (1), AB_CHECK_REPS (5), AB_KEEP=1 (keep the temp folder with
# every raw output; the worktrees and builds are removed all the same),
# AB_T_BUILD/STORE/COMPILE/EVAL/CHECK (time limits, s), CUDA_HOME
# (/usr/local/cuda), TMPDIR.
# Exits 1 (with the reason on stderr) when a ref does not resolve or build,
# or any benchmark command fails or passes its time limit.
set -euo pipefail

usage() {
  echo "usage: bash tests/bench/ab.sh REF_A REF_B [--reps N] [--out FILE]" >&2
  exit 2
}
die() {
  printf 'ab.sh: %s\n' "$*" >&2
  exit 1
}
log() { printf '[ab %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[ $# -ge 2 ] || usage
REF_A=$1 REF_B=$2
shift 2
REPS=3 OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer (got '$REPS')"

STORE_ARGS=${AB_STORE_ARGS:-"200000 10000"}
COMPILE_REPS=${AB_COMPILE_REPS:-3}
NVCC_REPS=${AB_NVCC_REPS:-1}
CHECK_REPS=${AB_CHECK_REPS:-5}
EVAL_ARGS=${AB_EVAL_ARGS:-"--protocol official --warmup 1 --iters 10 --timing-trials 1 --seed 1"}
ORDER=${AB_ORDER:-abba}
case $ORDER in abba|ab) ;; *) die "AB_ORDER must be abba or ab" ;; esac
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# time limits (seconds)
T_BUILD=${AB_T_BUILD:-2700} T_STORE=${AB_T_STORE:-300} T_COMPILE=${AB_T_COMPILE:-1200}
T_EVAL=${AB_T_EVAL:-600} T_CHECK=${AB_T_CHECK:-120}

for tool in git cmake python3 timeout; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

REPO=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel) ||
  die "not inside a git repository"
if [ -n "$OUT" ]; then
  case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
  mkdir -p "$(dirname "$OUT")" || die "cannot create the folder of $OUT"
fi
SHA_A=$(git -C "$REPO" rev-parse --verify --quiet "$REF_A^{commit}") || die "ref '$REF_A' does not resolve to a commit"
SHA_B=$(git -C "$REPO" rev-parse --verify --quiet "$REF_B^{commit}") || die "ref '$REF_B' does not resolve to a commit"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/khlua-ab-XXXXXX") || die "mktemp failed"
WORKTREES=()
cleanup() {
  local rc=$?
  for wt in "${WORKTREES[@]}"; do
    git -C "$REPO" worktree remove --force "$wt" >/dev/null 2>&1 ||
      echo "ab.sh: could not remove worktree $wt" >&2
  done
  git -C "$REPO" worktree prune >/dev/null 2>&1 || true
  if [ "${AB_KEEP:-0}" = 1 ]; then
    echo "ab.sh: raw outputs kept in $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

# run_to LIMIT OUTFILE ERRFILE WHAT CMD...: CMD under timeout; dies with the
# reason and the tail of its stderr unless it exits 0 (or an allowed code in
# $OK_RC, e.g. OK_RC="0 77")
run_to() {
  local limit=$1 out=$2 err=$3 what=$4 rc=0
  shift 4
  timeout -k 10 "$limit" "$@" >"$out" 2>"$err" || rc=$?
  for ok in ${OK_RC:-0}; do
    [ "$rc" = "$ok" ] && return "$rc"
  done
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "ab.sh: $what: timed out after $limit s" >&2
  else
    echo "ab.sh: $what: exit code $rc" >&2
  fi
  echo "  command: $*" >&2
  echo "  --- last lines of its stderr ($err):" >&2
  tail -n 20 "$err" | sed 's/^/  /' >&2
  echo "  --- last lines of its stdout ($out):" >&2
  tail -n 10 "$out" | sed 's/^/  /' >&2
  exit 1
}

# $TIMED FILE CMD...: runs CMD, writes "wall_s cpu_s" (cpu: user + sys of CMD
# and the descendants it waited for) to FILE, exits with CMD's status (a
# program, not a function, so that timeout can run it)
cat >"$TMP/timed.py" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[2:])
w = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{w} {r.ru_utime + r.ru_stime}\n")
sys.exit(rc if rc >= 0 else 128 - rc)
PY
TIMED=(python3 "$TMP/timed.py")

# ---- worktrees and builds
build_ref() { # build_ref TAG SHA REF
  local tag=$1 sha=$2 ref=$3 wt=$TMP/$1 bd=$TMP/$1/build-ab
  log "$tag: worktree of $ref ($sha)"
  git -C "$REPO" worktree add --detach "$wt" "$sha" >"$TMP/$tag.worktree.log" 2>&1 ||
    { cat "$TMP/$tag.worktree.log" >&2; die "$tag: git worktree add of '$ref' failed"; }
  WORKTREES+=("$wt")
  local opts=(-DCMAKE_BUILD_TYPE=Release -DCUDA_HOME="$CUDA_HOME")
  # the options as this ref's CMakeLists.txt names them
  grep -q 'option(KHLUA_SANITIZE' "$wt/CMakeLists.txt" && opts+=(-DKHLUA_SANITIZE=OFF)
  grep -q 'option(KHLUA_WERROR' "$wt/CMakeLists.txt" && opts+=(-DKHLUA_WERROR=OFF)
  grep -q 'option(KHLUA_PORTABLE' "$wt/CMakeLists.txt" && opts+=(-DKHLUA_PORTABLE=OFF)
  log "$tag: configuring (${opts[*]})"
  timeout -k 10 "$T_BUILD" cmake -S "$wt" -B "$bd" "${opts[@]}" >"$TMP/$tag.configure.log" 2>&1 ||
    { tail -n 30 "$TMP/$tag.configure.log" >&2; die "$tag: '$ref' ($sha) does not configure (cmake); log above"; }
  log "$tag: building khlua bench_store bench_compile (-j$(nproc))"
  timeout -k 10 "$T_BUILD" cmake --build "$bd" -j"$(nproc)" --target khlua bench_store bench_compile \
    >"$TMP/$tag.build.log" 2>&1 ||
    { grep -E 'error|Error' "$TMP/$tag.build.log" | head -n 30 >&2; tail -n 15 "$TMP/$tag.build.log" >&2
      die "$tag: '$ref' ($sha) does not build (or passed the $T_BUILD s limit); log above"; }
  for exe in khlua tests/bench_store tests/bench_compile; do
    [ -x "$bd/$exe" ] || die "$tag: the build of '$ref' has no $bd/$exe"
  done
  # the build's own settings, for the record
  grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$bd/CMakeCache.txt" ||
    die "$tag: the build is not Release"
  if grep -q '^KHLUA_SANITIZE:BOOL=ON' "$bd/CMakeCache.txt"; then die "$tag: sanitizers are on"; fi
}

START_S=$(date +%s)
build_ref A "$SHA_A" "$REF_A"
build_ref B "$SHA_B" "$REF_B"
log "builds done in $(( $(date +%s) - START_S )) s"

# each build runs on its own checkout (KH_SOURCE_DIR is compiled in); the
# benchmark inputs are compared here so the table can say when they differ
CORPUS_SAME=yes PKG_SAME=yes
git -C "$REPO" diff --quiet "$SHA_A" "$SHA_B" -- tests/bench/corpus || CORPUS_SAME=no
git -C "$REPO" diff --quiet "$SHA_A" "$SHA_B" -- kernels/host_rmsnorm || PKG_SAME=no
BENCH_SAME=yes
git -C "$REPO" diff --quiet "$SHA_A" "$SHA_B" -- tests/bench/bench_store.c tests/bench/bench_compile.c ||
  BENCH_SAME=no

baseline_of() { # the package's khlua.baseline
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["khlua"]["baseline"])' \
    "$1/kernels/host_rmsnorm/definition.json"
}
BASE_A=$(baseline_of "$TMP/A") || die "A: no khlua.baseline in kernels/host_rmsnorm/definition.json"
BASE_B=$(baseline_of "$TMP/B") || die "B: no khlua.baseline in kernels/host_rmsnorm/definition.json"

RAW=$TMP/raw
mkdir -p "$RAW"
VALUES=$TMP/values.tsv # tag round metric value
: >"$VALUES"

# ---- the benchmarks of one build, one round
bench_store() { # TAG ROUND
  local tag=$1 r=$2 bd=$TMP/$1/build-ab o=$RAW/store.$1.$2
  mkdir -p "$TMP/tmp.$tag"
  # shellcheck disable=SC2086
  TMPDIR=$TMP/tmp.$tag run_to "$T_STORE" "$o.out" "$o.err" "$tag round $r: bench_store" \
    "$bd/tests/bench_store" $STORE_ARGS
  python3 - "$o.out" "$tag" "$r" >>"$VALUES" <<'PY' || die "$1 round $2: cannot parse bench_store's output ($o.out)"
import re, sys
text = open(sys.argv[1]).read()
tag, r = sys.argv[2], sys.argv[3]
out = []
m = re.search(r"record writes \(batched\):\s+([\d.]+) records/s(?:.*?\)\s+([\d.]+)/s)?", text)
out.append(("store: record writes, records/s", m.group(1)))
if m.group(2):
    out.append(("store: anchor raw LMDB writes, records/s (control)", m.group(2)))
m = re.search(r"blob put:\s+([\d.]+) MB/s\s+anchor \(XXH3-128 \+ zstd-3 alone\)\s+([\d.]+) MB/s", text)
out.append(("store: blob put, MB/s", m.group(1)))
m2 = re.search(r"blob get:\s+([\d.]+) MB/s", text)
out.append(("store: blob get, MB/s", m2.group(1)))
out.append(("store: anchor XXH3+zstd, MB/s (control)", m.group(2)))
m = re.search(r"anchor \(raw get \+ parse\) p50 ([\d.]+) us p99 ([\d.]+) us", text)
out.append(("store: anchor raw get p50, us (control)", m.group(1)))
names = ["get by id", "task+type, newest 10, ids", "task+type, newest 10",
         "candidate, newest 1", "type+status, newest 10, ids", "type+status, newest 10"]
for n in names:
    m = re.search(r"^\s+" + re.escape(n) + r"\s+([\d.]+)\s+([\d.]+)\s+p99/anchor", text, re.M)
    out.append((f"store: query '{n}' p50, us", m.group(1)))
    out.append((f"store: query '{n}' p99, us", m.group(2)))
for k, v in out:
    print(f"{tag}\t{r}\t{k}\t{v}")
PY
}

bench_compile() { # TAG ROUND
  local tag=$1 r=$2 bd=$TMP/$1/build-ab o=$RAW/compile.$1.$2 rc=0
  OK_RC="0 77" run_to "$T_COMPILE" "$o.out" "$o.err" "$tag round $r: bench_compile" \
    "$bd/tests/bench_compile" "$TMP/$tag/tests/bench/corpus" --reps "$COMPILE_REPS" \
    --nvcc-reps "$NVCC_REPS" --khlua "$bd/khlua" || rc=$?
  if [ "$rc" = 77 ]; then
    echo "$tag	$r	compile: skipped (no NVRTC)	nan" >>"$VALUES"
    return 0
  fi
  grep -q 'no khlua binary' "$o.err" && die "$tag round $r: bench_compile did not find $bd/khlua"
  python3 - "$o.out" "$tag" "$r" >>"$VALUES" <<'PY' || die "$1 round $2: cannot parse bench_compile's output ($o.out)"
import re, sys
text = open(sys.argv[1]).read()
tag, r = sys.argv[2], sys.argv[3]
rows = {}
for m in re.finditer(r"^(plain|fp16/bf16|cg|cub|all)\s+(cold|warm|warm-iso|server|cache|store|nvcc)\s+([\d.]+)\s+([\d.]+)", text, re.M):
    rows[(m.group(1), m.group(2))] = m.group(3)
want = [(c, md) for c in ("plain", "fp16/bf16", "cg", "cub", "all") for md in ("warm", "server", "store")]
want += [("all", "cold"), ("all", "cache"), ("all", "nvcc")]
for c, md in want:
    if (c, md) not in rows:
        if md == "nvcc":  # --nvcc-reps 0, or no nvcc here
            continue
        sys.exit(f"no {c} {md} row")
    label = f"compile: {c} {md} p50, ms" + (" (control)" if md == "nvcc" else "")
    print(f"{tag}\t{r}\t{label}\t{rows[(c, md)]}")
PY
}

bench_turnaround() { # TAG ROUND
  local tag=$1 r=$2 bd=$TMP/$1/build-ab o=$RAW/turn.$1.$2 base store wall cpu calls
  base=$BASE_A
  [ "$tag" = B ] && base=$BASE_B
  store=$TMP/store.$tag.$r
  rm -rf "$store"
  # shellcheck disable=SC2086
  KHLUA_STORE=$store run_to "$T_EVAL" "$o.eval.out" "$o.eval.err" "$tag round $r: khlua eval" \
    "${TIMED[@]}" "$o.eval.time" "$bd/khlua" --store "$store" eval --task "$TMP/$tag/kernels/host_rmsnorm" \
    --solution "$base" $EVAL_ARGS --json
  rm -rf "$store"
  read -r wall cpu <"$o.eval.time"
  calls=$(python3 -c '
import json, sys
t = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bad = [x["evaluation"]["status"] for x in t if x["evaluation"]["status"] != "PASSED"]
if not t or bad:
    sys.exit(f"{len(t)} workloads, not PASSED: {bad}")
print(sum((x["evaluation"].get("khlua", {}).get("timed_outputs_verified") or {}).get("calls", 0) for x in t))' \
    "$o.eval.out") || die "$tag round $r: khlua eval's JSON ($o.eval.out): not every workload PASSED"
  {
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua eval, timed (fixed counts), wall s" "$wall"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua eval, timed (fixed counts), CPU s" "$cpu"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua eval, timed calls incl. retakes (work done, info)" "$calls"
  } >>"$VALUES"
  # eval without timing (correctness alone: fixed work, the harness's own
  # cost) and task check: short, so the median of CHECK_REPS each
  local walls=() cpus=() i
  for i in $(seq 1 "$CHECK_REPS"); do
    store=$TMP/store.nt.$tag.$r.$i
    KHLUA_STORE=$store run_to "$T_EVAL" "$o.nt.out" "$o.nt.err" "$tag round $r: khlua eval --no-timing" \
      "${TIMED[@]}" "$o.nt.time" "$bd/khlua" --store "$store" eval \
      --task "$TMP/$tag/kernels/host_rmsnorm" --solution "$base" --no-timing --seed 1
    rm -rf "$store"
    read -r wall cpu <"$o.nt.time"
    walls+=("$wall")
    cpus+=("$cpu")
  done
  {
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua eval --no-timing (median of $CHECK_REPS), wall s" "$(med "${walls[@]}")"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua eval --no-timing (median of $CHECK_REPS), CPU s" "$(med "${cpus[@]}")"
  } >>"$VALUES"
  walls=() cpus=()
  for i in $(seq 1 "$CHECK_REPS"); do
    KHLUA_STORE=$TMP/store.check.$tag run_to "$T_CHECK" "$o.check.out" "$o.check.err" \
      "$tag round $r: khlua task check" "${TIMED[@]}" "$o.check.time" \
      "$bd/khlua" task check "$TMP/$tag/kernels/host_rmsnorm"
    read -r wall cpu <"$o.check.time"
    walls+=("$wall")
    cpus+=("$cpu")
  done
  rm -rf "$TMP/store.check.$tag"
  {
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua task check (median of $CHECK_REPS), wall s" "$(med "${walls[@]}")"
    printf '%s\t%s\t%s\t%s\n' "$tag" "$r" "turnaround: khlua task check (median of $CHECK_REPS), CPU s" "$(med "${cpus[@]}")"
  } >>"$VALUES"
}

med() { python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"; }

LOADS=() # the 1-minute load average before every step
for r in $(seq 1 "$REPS"); do
  tags="A B"
  [ "$ORDER" = abba ] && [ $((r % 2)) = 0 ] && tags="B A"
  for kind in store compile turnaround; do
    for tag in $tags; do
      LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")
      log "round $r/$REPS: $kind $tag (load ${LOADS[-1]})"
      "bench_$kind" "$tag" "$r"
    done
  done
done
LOAD_RANGE=$(printf '%s\n' "${LOADS[@]}" | sort -g | sed -n '1p;$p' | paste -sd- -)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the table
REPORT=$TMP/report.txt
python3 - "$VALUES" "$REPS" >"$TMP/table.txt" <<'PY' || die "cannot make the table"
import math, statistics, sys
vals = {}
order = []
for line in open(sys.argv[1]):
    tag, r, metric, v = line.rstrip("\n").split("\t")
    if metric not in vals:
        vals[metric] = {"A": [], "B": []}
        order.append(metric)
    vals[metric][tag].append(float(v))
def higher_better(m):
    return "records/s" in m or "MB/s" in m
w = max(len(m) for m in order)
print(f"{'metric':{w}}  {'A median':>10}  {'B median':>10}  {'B/A':>6}  better  B vs A")
flags = []
for m in order:
    a, b = vals[m]["A"], vals[m]["B"]
    if not a or not b or any(math.isnan(x) for x in a + b):
        print(f"{m:{w}}  {'-':>10}  {'-':>10}  {'-':>6}")
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    ratio = mb / ma if ma else float("inf")
    hb = higher_better(m)
    worse = (1 / ratio if ratio else float("inf")) if hb else ratio  # > 1: B is worse
    note = f"{'worse' if worse > 1 else 'better'} {abs(worse - 1) * 100:4.1f}%"
    if "(work done, info)" in m:
        print(f"{m:{w}}  {ma:10.0f}  {mb:10.0f}  {ratio:6.3f}  {'-':6}  {'same work' if ma == mb else 'work differs'}")
        continue
    if worse > 1.10 and "(control)" not in m:
        note += "  <-- B >10% worse"
        flags.append(m)
    fmt = (lambda x: f"{x:10.0f}") if max(ma, mb) >= 1000 else (lambda x: f"{x:10.3f}")
    print(f"{m:{w}}  {fmt(ma)}  {fmt(mb)}  {ratio:6.3f}  {'higher' if hb else 'lower ':6}  {note}")
print()
print("per-round values (A | B):")
for m in order:
    a = " ".join(f"{x:g}" for x in vals[m]["A"])
    b = " ".join(f"{x:g}" for x in vals[m]["B"])
    print(f"  {m:{w}}  {a} | {b}")
print()
if flags:
    print(f"B more than 10% worse than A on {len(flags)} metric(s): " + "; ".join(flags))
else:
    print("B is not more than 10% worse than A on any metric (controls excluded)")
PY

{
  echo "# khlua A/B benchmarks (tests/bench/ab.sh), $DATE"
  echo "# A = $REF_A  $(git -C "$REPO" log -1 --format='%h %cd %s' --date=short "$SHA_A" | cut -c1-110)"
  echo "# B = $REF_B  $(git -C "$REPO" log -1 --format='%h %cd %s' --date=short "$SHA_B" | cut -c1-110)"
  echo "# A $SHA_A, B $SHA_B"
  echo "# machine: $(uname -n), nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$//'), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "#   load average (1/5/15 min) before $LOAD_BEFORE, after $LOAD_AFTER; 1-min load at each step $LOAD_RANGE"
  echo "# builds: Release (-O3 -DNDEBUG), no sanitizers, non-portable; each in its own worktree"
  if [ "$ORDER" = abba ]; then
    echo "# $REPS rounds; every benchmark runs for both builds back to back, A B in odd rounds, B A in even ones; medians over rounds"
  else
    echo "# $REPS rounds; in each round every benchmark runs for A then B; medians over rounds"
  fi
  echo "#   store:      bench_store $STORE_ARGS (bulk mode)"
  echo "#   compile:    bench_compile <ref's tests/bench/corpus> --reps $COMPILE_REPS --nvcc-reps $NVCC_REPS --khlua <ref's khlua>"
  echo "#   turnaround: khlua --store <fresh> eval --task kernels/host_rmsnorm --solution <khlua.baseline: A $BASE_A, B $BASE_B>"
  echo "#               $EVAL_ARGS --json (fixed counts; host backend; calls retaken under load counted);"
  echo "#               the same with --no-timing --seed 1 (median of $CHECK_REPS); khlua task check kernels/host_rmsnorm (median of $CHECK_REPS);"
  echo "#               wall and CPU (user+sys of khlua and the workers it waited for)"
  echo "#   timing:     bench_timing skipped: it needs a GPU (none here)"
  echo "# inputs identical between the refs: corpus $CORPUS_SAME, kernels/host_rmsnorm $PKG_SAME, bench_store.c/bench_compile.c $BENCH_SAME"
  echo "# (control) rows time code that is the same in both builds (raw LMDB, XXH3+zstd, nvcc): they show the"
  echo "#   machine's noise between A and B runs and are not flagged"
  echo
  cat "$TMP/table.txt"
} >"$REPORT"
cat "$REPORT"
if [ -n "$OUT" ]; then
  cp "$REPORT" "$OUT" || die "cannot write $OUT"
  log "written to $OUT"
fi
