/*
 * Part of gpu-exporter's test fake of libnvidia-ml.so.1 (see README.md in this folder).
 *
 * This file is compiled against NVIDIA's nvml.h, installed at build time from the PyPI wheel
 * nvidia-nvml-dev (never copied into this repository). That header asks that its notice be
 * included in the internal comments of code using it; here it is, verbatim:
 *
 * Copyright 1993-2026 NVIDIA Corporation.  All rights reserved.
 *
 * NOTICE TO USER:
 *
 * This source code is subject to NVIDIA ownership rights under U.S. and
 * international Copyright laws.  Users and possessors of this source code
 * are hereby granted a nonexclusive, royalty-free license to use this code
 * in individual and commercial software.
 *
 * NVIDIA MAKES NO REPRESENTATION ABOUT THE SUITABILITY OF THIS SOURCE
 * CODE FOR ANY PURPOSE.  IT IS PROVIDED "AS IS" WITHOUT EXPRESS OR
 * IMPLIED WARRANTY OF ANY KIND.  NVIDIA DISCLAIMS ALL WARRANTIES WITH
 * REGARD TO THIS SOURCE CODE, INCLUDING ALL IMPLIED WARRANTIES OF
 * MERCHANTABILITY, NONINFRINGEMENT, AND FITNESS FOR A PARTICULAR PURPOSE.
 * IN NO EVENT SHALL NVIDIA BE LIABLE FOR ANY SPECIAL, INDIRECT, INCIDENTAL,
 * OR CONSEQUENTIAL DAMAGES, OR ANY DAMAGES WHATSOEVER RESULTING FROM LOSS
 * OF USE, DATA OR PROFITS,  WHETHER IN AN ACTION OF CONTRACT, NEGLIGENCE
 * OR OTHER TORTIOUS ACTION,  ARISING OUT OF OR IN CONNECTION WITH THE USE
 * OR PERFORMANCE OF THIS SOURCE CODE.
 *
 * U.S. Government End Users.   This source code is a "commercial item" as
 * that term is defined at  48 C.F.R. 2.101 (OCT 1995), consisting  of
 * "commercial computer  software"  and "commercial computer software
 * documentation" as such terms are  used in 48 C.F.R. 12.212 (SEPT 1995)
 * and is provided to the U.S. Government only as a commercial end item.
 * Consistent with 48 C.F.R.12.212 and 48 C.F.R. 227.7202-1 through
 * 227.7202-4 (JUNE 1995), all U.S. Government End Users acquire the
 * source code with only those rights set forth herein.
 *
 * Any use of this source code in individual and commercial software must
 * include, in the user documentation and internal comments to the code,
 * the above Disclaimer and U.S. Government End Users Notice.
 */

/* workload.c: running processes and their utilisation, MIG devices, NVLink, and the field-value
 * API (memory temperature, PCIe replays, NVLink link count, throughput and error counters). */
#include "fakenvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Processes                                                                                  */

struct proc {
    int k; /* the K of gpuN.process.K.* */
    unsigned pid;
    unsigned long long used_memory;
    unsigned gpu_instance_id, compute_instance_id;
};

/* Which of a GPU's processes a call lists. */
enum proc_kind {
    PROCS_ALL,      /* compute and graphics: process utilisation samples */
    PROCS_COMPUTE,  /* gpuN.process.K.graphics absent or 0 */
    PROCS_GRAPHICS, /* gpuN.process.K.graphics nonzero */
    PROCS_NONE,     /* MPS: the fake has no MPS clients */
};

/* NVML's "not in a MIG instance" GPU/compute instance id. */
#define FAKE_NO_INSTANCE 0xFFFFFFFFu

static unsigned instance_id(const struct fake_call *c, int k, const char *which)
{
    unsigned long long v;
    return fake_dev_u64(c, &v, "process.%d.%s", k, which) ? (unsigned)v : FAKE_NO_INSTANCE;
}

/* The processes of a GPU of the given kind, in K order; used_memory is NVML_VALUE_NOT_AVAILABLE
 * when absent, as real NVML reports it when it cannot tell. */
static unsigned list_processes(const struct fake_call *c, enum proc_kind kind, struct proc out[FAKE_MAX_PROCS])
{
    unsigned n = 0;
    if (kind == PROCS_NONE)
        return 0;
    for (int k = 0; k < FAKE_MAX_PROCS; k++) {
        unsigned long long pid, graphics = 0;
        if (!(c->s->gpu[c->gpu].proc_mask & (1ull << k)) || !fake_dev_u64(c, &pid, "process.%d.pid", k))
            continue;
        fake_dev_u64(c, &graphics, "process.%d.graphics", k);
        if ((kind == PROCS_COMPUTE && graphics != 0) || (kind == PROCS_GRAPHICS && graphics == 0))
            continue;
        out[n].k = k;
        out[n].pid = (unsigned)pid;
        if (!fake_dev_u64(c, &out[n].used_memory, "process.%d.used_memory", k))
            out[n].used_memory = (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
        out[n].gpu_instance_id = instance_id(c, k, "gpu_instance_id");
        out[n].compute_instance_id = instance_id(c, k, "compute_instance_id");
        n++;
    }
    return n;
}

/* Two-call pattern: count 0 and a NULL array gives SUCCESS when there are none, otherwise
 * INSUFFICIENT_SIZE and the count. The v1 struct has no instance ids. */
static nvmlReturn_t running_processes(const struct fake_call *c, enum proc_kind kind, unsigned int *infoCount,
                                      nvmlProcessInfo_v2_t *infos_v2, nvmlProcessInfo_v1_t *infos_v1)
{
    REQUIRE(infoCount != NULL);
    struct proc p[FAKE_MAX_PROCS];
    unsigned n = list_processes(c, kind, p);
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    REQUIRE(n == 0 || infos_v2 != NULL || infos_v1 != NULL);
    for (unsigned i = 0; i < n; i++) {
        if (infos_v2 != NULL)
            infos_v2[i] = (nvmlProcessInfo_v2_t){.pid = p[i].pid,
                                                 .usedGpuMemory = p[i].used_memory,
                                                 .gpuInstanceId = p[i].gpu_instance_id,
                                                 .computeInstanceId = p[i].compute_instance_id};
        else
            infos_v1[i] = (nvmlProcessInfo_v1_t){.pid = p[i].pid, .usedGpuMemory = p[i].used_memory};
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_COMPUTE, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_v2_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_COMPUTE, infoCount, infos, NULL);
}

/* The legacy symbol takes the smaller v1 struct; it must not be an alias of _v3. */
nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                          nvmlProcessInfo_v1_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_COMPUTE, infoCount, NULL, infos);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_GRAPHICS, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_GRAPHICS, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_NONE, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_v2_t *infos)
{
    DEVICE_PROLOGUE(device, 0);
    return running_processes(&c, PROCS_NONE, infoCount, infos, NULL);
}

/* One sample per process, compute and graphics, stamped with the current wall-clock time in
 * microseconds: every sample is newer than any lastSeenTimeStamp in the past, and none is when
 * lastSeenTimeStamp >= now (NOT_FOUND, as with no processes). pynvml's first call passes a NULL
 * array and accepts only INSUFFICIENT_SIZE. */
nvmlReturn_t DECLDIR nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(processSamplesCount != NULL);
    struct proc p[FAKE_MAX_PROCS];
    unsigned long long now = fake_now_us();
    unsigned n = lastSeenTimeStamp < now ? list_processes(&c, PROCS_ALL, p) : 0;
    if (n == 0) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (utilization == NULL || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned long long sm = 0, mem = 0, enc = 0, dec = 0;
        fake_dev_u64(&c, &sm, "process.%d.sm_util", p[i].k);
        fake_dev_u64(&c, &mem, "process.%d.mem_util", p[i].k);
        fake_dev_u64(&c, &enc, "process.%d.enc_util", p[i].k);
        fake_dev_u64(&c, &dec, "process.%d.dec_util", p[i].k);
        utilization[i] = (nvmlProcessUtilizationSample_t){.pid = p[i].pid,
                                                          .timeStamp = now,
                                                          .smUtil = (unsigned)sm,
                                                          .memUtil = (unsigned)mem,
                                                          .encUtil = (unsigned)enc,
                                                          .decUtil = (unsigned)dec};
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* MIG                                                                                        */

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(currentMode != NULL && pendingMode != NULL);
    unsigned mode;
    nvmlReturn_t r = fake_uint(&c, &mode, "mig.mode");
    if (r == NVML_SUCCESS)
        *currentMode = *pendingMode = mode;
    return r;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(count != NULL);
    unsigned long long mode = 0;
    fake_dev_u64(&c, &mode, "mig.mode");
    *count = mode == 1 ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                         nvmlDevice_t *migDevice)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(migDevice != NULL);
    if (index >= FAKE_MAX_MIG || !(c.s->gpu[c.gpu].mig_mask & (1u << index)))
        return NVML_ERROR_NOT_FOUND;
    *migDevice = fake_handle(c.gpu, (int)index);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(isMigDevice != NULL);
    *isMigDevice = c.mig >= 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    DEVICE_PROLOGUE(migDevice, FAKE_MIG_OK);
    REQUIRE(device != NULL && c.mig >= 0);
    *device = fake_handle(c.gpu, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(id != NULL && c.mig >= 0);
    char key[48];
    snprintf(key, sizeof key, "mig.%d.gpu_instance_id", c.mig);
    return fake_uint(&c, id, key);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(id != NULL && c.mig >= 0);
    char key[48];
    snprintf(key, sizeof key, "mig.%d.compute_instance_id", c.mig);
    return fake_uint(&c, id, key);
}

/* ------------------------------------------------------------------------------------------ */
/* NVLink                                                                                     */

nvmlReturn_t DECLDIR nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(isActive != NULL && link < FAKE_MAX_LINKS);
    unsigned long long state;
    if (!fake_dev_u64(&c, &state, "nvlink.%u.state", link))
        return NVML_ERROR_NOT_SUPPORTED;
    *isActive = state ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

static const char *nvlink_counter_key(nvmlNvLinkErrorCounter_t counter)
{
    switch (counter) {
    case NVML_NVLINK_ERROR_DL_REPLAY:
        return "replay_errors";
    case NVML_NVLINK_ERROR_DL_RECOVERY:
        return "recovery_errors";
    case NVML_NVLINK_ERROR_DL_CRC_DATA:
        return "crc_errors";
    case NVML_NVLINK_ERROR_DL_CRC_FLIT:
        return "crc_flit_errors";
    default:
        return NULL;
    }
}

nvmlReturn_t DECLDIR nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                     nvmlNvLinkErrorCounter_t counter, unsigned long long *counterValue)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(counterValue != NULL && link < FAKE_MAX_LINKS);
    const char *key = nvlink_counter_key(counter);
    if (key == NULL || !fake_dev_u64(&c, counterValue, "nvlink.%u.%s", link, key))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Field values                                                                               */

/* Per-lane NVLink error fields: L0-L5 and L6-L11 are two runs of ids, plus a _TOTAL id. */
static bool nvlink_error_field(unsigned id, const char **key, int *link)
{
    static const struct {
        unsigned l0, l6, total;
        const char *key;
    } k_runs[] = {
        {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6,
         NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, "crc_errors"},
        {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6,
         NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, "replay_errors"},
        {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6,
         NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, "recovery_errors"},
        {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6,
         NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, "crc_flit_errors"},
    };
    for (size_t i = 0; i < sizeof k_runs / sizeof k_runs[0]; i++) {
        *key = k_runs[i].key;
        if (id >= k_runs[i].l0 && id < k_runs[i].l0 + 6)
            *link = (int)(id - k_runs[i].l0);
        else if (id >= k_runs[i].l6 && id < k_runs[i].l6 + 6)
            *link = (int)(id - k_runs[i].l6) + 6;
        else if (id == k_runs[i].total)
            *link = -1;
        else
            continue;
        return true;
    }
    return false;
}

/* Sum of nvlink.L.<key> over the links the scenario mentions; false if none has the key. */
static bool nvlink_total(const struct fake_call *c, const char *key, unsigned long long *sum)
{
    bool any = false;
    *sum = 0;
    for (int l = 0; l < FAKE_MAX_LINKS; l++) {
        unsigned long long v;
        if ((c->s->gpu[c->gpu].link_mask & (1ull << l)) && fake_dev_u64(c, &v, "nvlink.%d.%s", l, key)) {
            *sum += v;
            any = true;
        }
    }
    return any;
}

#define MEMORY_ERRORS "nvmlDeviceGetMemoryErrorCounter" /* ECC errors by location */

/* Device-level fields that stand for a device call: the same scenario key, and that call's fault
 * keys (delay.F, error.F) apply to the entry. ``flag``: the value is 0/1 (any non-zero key is 1). */
static const struct {
    unsigned id;
    const char *key;
    const char *sym;
    bool flag;
    bool uint;
} k_call_fields[] = {
    {NVML_FI_DEV_POWER_AVERAGE, "power.usage", "nvmlDeviceGetPowerUsage", false, true},
    {NVML_FI_DEV_POWER_INSTANT, "power.usage", "nvmlDeviceGetPowerUsage", false, true},
    {NVML_FI_DEV_POWER_MIN_LIMIT, "power.min_limit", "nvmlDeviceGetPowerManagementLimitConstraints", false, true},
    {NVML_FI_DEV_POWER_MAX_LIMIT, "power.max_limit", "nvmlDeviceGetPowerManagementLimitConstraints", false, true},
    {NVML_FI_DEV_POWER_DEFAULT_LIMIT, "power.default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", false, true},
    {NVML_FI_DEV_POWER_CURRENT_LIMIT, "power.enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", false, true},
    {NVML_FI_DEV_POWER_REQUESTED_LIMIT, "power.limit", "nvmlDeviceGetPowerManagementLimit", false, true},
    {NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, "energy", "nvmlDeviceGetTotalEnergyConsumption", false, false},
    {NVML_FI_DEV_ENERGY, "energy", "nvmlDeviceGetTotalEnergyConsumption", false, false},
    {NVML_FI_DEV_PCIE_REPLAY_COUNTER, "pcie.replay_counter", "nvmlDeviceGetPcieReplayCounter", false, false},
    {NVML_FI_DEV_ECC_CURRENT, "ecc.mode", "nvmlDeviceGetEccMode", true, true},
    {NVML_FI_DEV_ECC_SBE_VOL_TOTAL, "ecc.volatile.corrected", "nvmlDeviceGetTotalEccErrors", false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_TOTAL, "ecc.volatile.uncorrected", "nvmlDeviceGetTotalEccErrors", false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_TOTAL, "ecc.aggregate.corrected", "nvmlDeviceGetTotalEccErrors", false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_TOTAL, "ecc.aggregate.uncorrected", "nvmlDeviceGetTotalEccErrors", false, false},
    {NVML_FI_DEV_ECC_SBE_VOL_L1, "ecc.volatile.corrected.l1_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_L1, "ecc.volatile.uncorrected.l1_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_L1, "ecc.aggregate.corrected.l1_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_L1, "ecc.aggregate.uncorrected.l1_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_VOL_L2, "ecc.volatile.corrected.l2_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_L2, "ecc.volatile.uncorrected.l2_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_L2, "ecc.aggregate.corrected.l2_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_L2, "ecc.aggregate.uncorrected.l2_cache", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_VOL_DEV, "ecc.volatile.corrected.device_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_DEV, "ecc.volatile.uncorrected.device_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_DEV, "ecc.aggregate.corrected.device_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_DEV, "ecc.aggregate.uncorrected.device_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_VOL_REG, "ecc.volatile.corrected.register_file", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_REG, "ecc.volatile.uncorrected.register_file", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_REG, "ecc.aggregate.corrected.register_file", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_REG, "ecc.aggregate.uncorrected.register_file", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_VOL_TEX, "ecc.volatile.corrected.texture_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_TEX, "ecc.volatile.uncorrected.texture_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_SBE_AGG_TEX, "ecc.aggregate.corrected.texture_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_TEX, "ecc.aggregate.uncorrected.texture_memory", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_VOL_CBU, "ecc.volatile.uncorrected.cbu", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_ECC_DBE_AGG_CBU, "ecc.aggregate.uncorrected.cbu", MEMORY_ERRORS, false, false},
    {NVML_FI_DEV_RETIRED_SBE, "retired_pages.single_bit", "nvmlDeviceGetRetiredPages", false, false},
    {NVML_FI_DEV_RETIRED_DBE, "retired_pages.double_bit", "nvmlDeviceGetRetiredPages", false, false},
    {NVML_FI_DEV_RETIRED_PENDING, "retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", true, false},
    {NVML_FI_DEV_PERF_POLICY_POWER, "violation.power", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_THERMAL, "violation.thermal", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_SYNC_BOOST, "violation.sync_boost", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT, "violation.board_limit", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION, "violation.low_util", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_RELIABILITY, "violation.reliability", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS, "violation.app_clocks", "nvmlDeviceGetViolationStatus", false, false},
    {NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS, "violation.base_clocks", "nvmlDeviceGetViolationStatus", false, false},
};

/* ``gpuN.fields.unknown = id,id``: field ids this driver does not know (entry INVALID_ARGUMENT). */
static bool unknown_field(const struct fake_call *c, unsigned id)
{
    const char *list = fake_dev_str(c, "fields.unknown");
    for (const char *p = list; p != NULL && *p != '\0';) {
        char *end;
        unsigned long v = strtoul(p, &end, 0);
        if (end == p)
            break;
        if (v == id)
            return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

/* Remapped rows: the two counts or nothing, pending and failure 0 when not given (as the call). */
static nvmlReturn_t remapped_field(const struct fake_call *c, unsigned id, unsigned long long *v)
{
    unsigned corr, unc;
    if (fake_uint(c, &corr, "remapped_rows.correctable") != NVML_SUCCESS ||
        fake_uint(c, &unc, "remapped_rows.uncorrectable") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned pending = 0, failure = 0;
    fake_uint(c, &pending, "remapped_rows.pending");
    fake_uint(c, &failure, "remapped_rows.failure");
    *v = id == NVML_FI_DEV_REMAPPED_COR       ? corr
         : id == NVML_FI_DEV_REMAPPED_UNC     ? unc
         : id == NVML_FI_DEV_REMAPPED_PENDING ? pending
                                              : failure;
    return NVML_SUCCESS;
}

static nvmlReturn_t field_value(struct fake_call *c, nvmlFieldValue_t *f, bool is_absurd)
{
    unsigned long long v;
    const char *key;
    int link;
    nvmlReturn_t r;
    f->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    if (unknown_field(c, f->fieldId))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fake_field_only(c, f, &r))
        return r;
    if (fake_link_field(c, f, &r))
        return r;
    for (size_t i = 0; i < sizeof k_call_fields / sizeof k_call_fields[0]; i++) {
        if (k_call_fields[i].id != f->fieldId)
            continue;
        if ((r = fake_entry_fault(c, k_call_fields[i].sym)) != NVML_SUCCESS)
            return r;
        if (strcmp(k_call_fields[i].key, "energy") == 0) {
            if ((r = fake_energy(c, &v)) != NVML_SUCCESS)
                return r;
        } else if (!fake_dev_u64(c, &v, "%s", k_call_fields[i].key)) {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        if (k_call_fields[i].flag)
            v = v != 0;
        if (k_call_fields[i].uint) {
            f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            f->value.uiVal = (unsigned)v;
        } else {
            f->value.ullVal = v;
        }
        return NVML_SUCCESS;
    }
    switch (f->fieldId) {
    case NVML_FI_DEV_ECC_PENDING: /* ecc.pending, else ecc.mode (no change pending), as the call */
        if ((r = fake_entry_fault(c, "nvmlDeviceGetEccMode")) != NVML_SUCCESS)
            return r;
        if (!fake_dev_u64(c, &v, "ecc.pending") && !fake_dev_u64(c, &v, "ecc.mode"))
            return NVML_ERROR_NOT_SUPPORTED;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        f->value.uiVal = v != 0;
        return NVML_SUCCESS;
    case NVML_FI_DEV_MEMORY_TEMP:
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        if (is_absurd)
            v = FAKE_ABSURD_TEMPERATURE;
        else if (!fake_dev_u64(c, &v, "temperature.memory"))
            return NVML_ERROR_NOT_SUPPORTED;
        f->value.uiVal = (unsigned)v;
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_LINK_COUNT: {
        /* Links are numbered from 0, so the count is one more than the highest nvlink.L mentioned. */
        uint64_t mask = c->s->gpu[c->gpu].link_mask;
        if (mask == 0)
            return NVML_ERROR_NOT_SUPPORTED;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        f->value.uiVal = (unsigned)(64 - __builtin_clzll(mask));
        return NVML_SUCCESS;
    }
    case NVML_FI_DEV_REMAPPED_COR:
    case NVML_FI_DEV_REMAPPED_UNC:
    case NVML_FI_DEV_REMAPPED_PENDING:
    case NVML_FI_DEV_REMAPPED_FAILURE:
        if ((r = fake_entry_fault(c, "nvmlDeviceGetRemappedRows")) != NVML_SUCCESS ||
            (r = remapped_field(c, f->fieldId, &v)) != NVML_SUCCESS)
            return r;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        f->value.uiVal = (unsigned)v;
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_STATE:
        /* nvlink.L.state: 0-3 is NVML's NVML_NVLINK_STATE_* number (2 sleep, 3 active with traffic
         * disabled), any other non-zero value NVML_NVLINK_STATE_ACTIVE. */
        if ((r = fake_entry_fault(c, "nvmlDeviceGetNvLinkState")) != NVML_SUCCESS)
            return r;
        if (f->scopeId >= FAKE_MAX_LINKS || !fake_dev_u64(c, &v, "nvlink.%u.state", f->scopeId))
            return NVML_ERROR_NOT_SUPPORTED;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        f->value.uiVal = v <= NVML_NVLINK_STATE_ACTIVE_TRAFFIC_DISABLED ? (unsigned)v : NVML_NVLINK_STATE_ACTIVE;
        return NVML_SUCCESS;
    /* RAW (data + protocol overhead) reads the same keys: the fake has no protocol overhead. */
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
        if (f->scopeId >= FAKE_MAX_LINKS || !fake_dev_u64(c, &v, "nvlink.%u.tx", f->scopeId))
            return NVML_ERROR_NOT_SUPPORTED;
        break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX:
        if (f->scopeId >= FAKE_MAX_LINKS || !fake_dev_u64(c, &v, "nvlink.%u.rx", f->scopeId))
            return NVML_ERROR_NOT_SUPPORTED;
        break;
    default:
        if (!nvlink_error_field(f->fieldId, &key, &link))
            return NVML_ERROR_NOT_SUPPORTED;
        if ((r = fake_entry_fault(c, "nvmlDeviceGetNvLinkErrorCounter")) != NVML_SUCCESS)
            return r;
        if (link < 0 ? !nvlink_total(c, key, &v) : !fake_dev_u64(c, &v, "nvlink.%d.%s", link, key))
            return NVML_ERROR_NOT_SUPPORTED;
        break;
    }
    f->value.ullVal = v;
    return NVML_SUCCESS;
}

/* Every entry gets its own nvmlReturn; the call itself succeeds. */
nvmlReturn_t DECLDIR nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(valuesCount >= 0 && (valuesCount == 0 || values != NULL));
    unsigned long long absurd = 0;
    fake_dev_u64(&c, &absurd, "absurd");
    long long now = (long long)fake_now_us();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *f = &values[i];
        f->timestamp = now;
        f->latencyUsec = 0;
        memset(&f->value, 0, sizeof f->value);
        f->nvmlReturn = field_value(&c, f, absurd != 0);
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Accounting statistics (nvml.h, group nvmlAccountingStats)                                  */
/*
 * gpuN.accounting_mode (0 or 1; absent: the GPU does not support accounting). The stats calls answer
 * NOT_SUPPORTED while the mode is off or unsupported, as nvml.h says ("doesn't support this feature or
 * accounting mode is disabled"), and NOT_FOUND for a pid the driver has no stats of. The fake accounts only
 * the GPU's running processes (compute and graphics; its circular buffer holds no terminated ones):
 * maxMemoryUsage is gpuN.process.K.max_memory, else the memory the process holds now (the most the fake
 * has seen it hold), NVML_VALUE_NOT_AVAILABLE where neither is given; gpuUtilization and memoryUtilization
 * are its sm_util and mem_util (its lifetime's average, for a process whose load does not change);
 * time is 0 while it runs, isRunning 1, startTime 0 (the fake knows no start). */

/* The 4000 processes nvidia-smi -q reports as "Accounting Mode Buffer Size" on data-centre GPUs. */
#define FAKE_ACCOUNTING_BUFFER 4000u

/* SUCCESS when accounting mode is on, NOT_SUPPORTED otherwise. */
static nvmlReturn_t accounting_on(const struct fake_call *c)
{
    unsigned mode;
    return fake_uint(c, &mode, "accounting_mode") == NVML_SUCCESS && mode ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t DECLDIR nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(mode != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "accounting_mode") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(bufferSize != NULL);
    nvmlReturn_t ret = accounting_on(&c);
    if (ret != NVML_SUCCESS)
        return ret;
    *bufferSize = FAKE_ACCOUNTING_BUFFER;
    return NVML_SUCCESS;
}

/* Two-call pattern: count 0 and a NULL array gives INSUFFICIENT_SIZE and the count (nvml.h). */
nvmlReturn_t DECLDIR nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(count != NULL);
    nvmlReturn_t ret = accounting_on(&c);
    if (ret != NVML_SUCCESS)
        return ret;
    struct proc p[FAKE_MAX_PROCS];
    unsigned n = list_processes(&c, PROCS_ALL, p);
    if (*count < n || (n > 0 && pids == NULL)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++)
        pids[i] = p[i].pid;
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, nvmlAccountingStats_t *stats)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(stats != NULL);
    nvmlReturn_t ret = accounting_on(&c);
    if (ret != NVML_SUCCESS)
        return ret;
    struct proc p[FAKE_MAX_PROCS];
    unsigned n = list_processes(&c, PROCS_ALL, p);
    for (unsigned i = 0; i < n; i++) {
        if (p[i].pid != pid)
            continue;
        unsigned long long peak, sm = 0, mem = 0;
        if (!fake_dev_u64(&c, &peak, "process.%d.max_memory", p[i].k))
            peak = p[i].used_memory; /* NVML_VALUE_NOT_AVAILABLE where the memory is unknown too */
        fake_dev_u64(&c, &sm, "process.%d.sm_util", p[i].k);
        fake_dev_u64(&c, &mem, "process.%d.mem_util", p[i].k);
        *stats = (nvmlAccountingStats_t){.gpuUtilization = (unsigned)sm,
                                         .memoryUtilization = (unsigned)mem,
                                         .maxMemoryUsage = peak,
                                         .time = 0,
                                         .startTime = 0,
                                         .isRunning = 1};
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}
