/* doctor.h: what this machine offers khlua and what is missing.  Builds one
 * JSON report; the CLI (`khlua doctor`) and Lua (`kh.doctor()`) present it. */
#ifndef KH_DOCTOR_H
#define KH_DOCTOR_H

#include "core/engine.h"

#include <jansson.h>

/* The report:
 *   { "khlua": {...}, "checks": [ {name, status, detail, fix?}, ... ],
 *     "gpus": [ {index, name, compute_capability, memory_bytes, sms,
 *                l2_bytes, uuid, ...} ], "nvrtc": {...}|null, ... }
 * status is "ok", "missing" or "warn".  The GPU is probed in a child process
 * (the coordinator never calls the driver), so a hung or crashing driver
 * becomes a "missing" line, not a dead khlua.  Caller owns the reference
 * (json_decref).  NULL only when out of memory. */
json_t *kh_doctor_report(kh_engine *e, kh_err *err);

/* The GPU probe alone: {driver_version, gpus:[...]} or KH_ENODEV with why.
 * Runs in a child with the given deadline: forked, or, once this process
 * has the CUDA driver loaded (a fork could not initialise it), this
 * executable run afresh.  Caller owns *out. */
kh_status kh_doctor_probe_gpus(double timeout_s, json_t **out, kh_err *err);

/* The probe in a fresh process: `exe doctor --probe-gpus` (exe NULL: this
 * executable), the same answer as kh_doctor_probe_gpus. */
kh_status kh_doctor_probe_gpus_exec(const char *exe, double timeout_s, json_t **out, kh_err *err);

/* `khlua doctor --probe-gpus`: the probe's JSON on stdout; exit 0 when it
 * could write it. */
int kh_doctor_probe_gpus_main(void);

#endif
