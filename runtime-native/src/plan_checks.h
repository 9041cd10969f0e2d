/* What the loader checks of a function's tensors, memory plan and launches beyond their cross-references
 * (docs/format.md, "What a loader checks"), as tessera/vm/plan_checks.py and runtime-js/src/plan-checks.js
 * check them, so that the three runtimes refuse the same files:
 *
 * - at load, no tensor dimension negative (at the upper bounds, where its symbols have them), and no two
 *   tensors of different storages of an arena sharing bytes while both are live: such a plan would run and
 *   answer garbage;
 * - once the device is known, every storage's offset a multiple of the device's storage alignment and
 *   every launch's grid at the upper bounds within the device's workgroups per dimension. */
#ifndef TSR_PLAN_CHECKS_H
#define TSR_PLAN_CHECKS_H

#include "executable.h"

/* TESSERA_ERROR_FORMAT naming the first tensor dimension of f that is negative: a planned tensor's, an
 * alloc_tensor's, or one of a parameter's or a match's struct info. */
int tsr_check_dimensions(tsr_alloc *a, const tsr_function *f);

/* TESSERA_ERROR_FORMAT naming two storages of f's arena whose tensors share bytes while both are live
 * (plan_checks.c says when a tensor is live). `a` backs scratch memory, all of it freed before this returns. */
int tsr_check_live_storages(tsr_alloc *a, const tsr_function *f);

/* TESSERA_ERROR_UNSUPPORTED naming the first storage offset of exe that is not a multiple of
 * `storage_alignment`, or the first kernel grid that is larger at the upper bounds of a launch than
 * `max_workgroups` along one dimension; `device` names the device in the message. */
int tsr_check_device_fit(tsr_alloc *a, const tsr_executable *exe, const char *device, uint64_t storage_alignment,
                         int64_t max_workgroups);
/* The same for device `on` of a split build: the storages of its arena buffers and the launches of its
 * kernels only (on = -1: every one, as tsr_check_device_fit). */
int tsr_check_device_fit_on(tsr_alloc *a, const tsr_executable *exe, int32_t on, const char *device,
                            uint64_t storage_alignment, int64_t max_workgroups);

#endif
