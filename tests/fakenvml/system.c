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

/* system.c: init and shutdown, error strings, host-level queries, device enumeration and
 * look-up, and the event-set API that delivers scripted Xids. */
#include "fakenvml.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------------------------ */
/* Init, shutdown, error strings                                                              */

/* pynvml's nvmlInit() calls nvmlInitWithFlags; the other two are for C callers. */
nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    nvmlReturn_t r = fake_init();
    fake_trace(__func__, -1); /* after init, which may have just opened a new trace file */
    return r;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void)
{
    nvmlReturn_t r = fake_init();
    fake_trace(__func__, -1);
    return r;
}

nvmlReturn_t DECLDIR nvmlInit(void)
{
    nvmlReturn_t r = fake_init();
    fake_trace(__func__, -1);
    return r;
}

nvmlReturn_t DECLDIR nvmlShutdown(void)
{
    fake_trace(__func__, -1);
    return fake_shutdown();
}

const DECLDIR char *nvmlErrorString(nvmlReturn_t result)
{
    fake_trace(__func__, -1);
    return fake_error_text(result);
}

/* ------------------------------------------------------------------------------------------ */
/* Host                                                                                       */

static nvmlReturn_t host_string(const struct fake_scenario *s, const char *key, const char *fallback, char *buf,
                                unsigned int length)
{
    const char *v = fake_get(s, key);
    return fake_copy_str(buf, length, v != NULL ? v : fallback);
}

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    SYSTEM_PROLOGUE();
    (void)t;
    return host_string(s, "driver_version", "999.99", version, length);
}

nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    SYSTEM_PROLOGUE();
    (void)t;
    return host_string(s, "nvml_version", "13.999.99", version, length);
}

static nvmlReturn_t cuda_version(const struct fake_scenario *s, double t, int *out)
{
    REQUIRE(out != NULL);
    unsigned long long v = 13000;
    const char *text = fake_get(s, "cuda_driver_version");
    if (text != NULL && !fake_value_u64("cuda_driver_version", text, t, &v))
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (int)v;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    SYSTEM_PROLOGUE();
    return cuda_version(s, t, cudaDriverVersion);
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    SYSTEM_PROLOGUE();
    return cuda_version(s, t, cudaDriverVersion);
}

/* conf_compute.cc_feature (0/1) and, optionally, conf_compute.environment and .dev_tools_mode: the
 * system's confidential-compute state; without cc_feature: NOT_SUPPORTED (no CC-capable GPU). */
nvmlReturn_t DECLDIR nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state)
{
    SYSTEM_PROLOGUE();
    REQUIRE(state != NULL);
    const char *feature = fake_get(s, "conf_compute.cc_feature");
    unsigned long long cc = 0, environment = 0, tools = 0;
    if (feature == NULL || !fake_value_u64("conf_compute.cc_feature", feature, t, &cc))
        return NVML_ERROR_NOT_SUPPORTED;
    const char *text = fake_get(s, "conf_compute.environment");
    if (text != NULL && !fake_value_u64("conf_compute.environment", text, t, &environment))
        return NVML_ERROR_NOT_SUPPORTED;
    text = fake_get(s, "conf_compute.dev_tools_mode");
    if (text != NULL && !fake_value_u64("conf_compute.dev_tools_mode", text, t, &tools))
        return NVML_ERROR_NOT_SUPPORTED;
    state->environment = (unsigned int)environment;
    state->ccFeature = (unsigned int)cc;
    state->devToolsMode = (unsigned int)tools;
    return NVML_SUCCESS;
}

/* Finds pid among the processes of every present GPU. */
nvmlReturn_t DECLDIR nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    SYSTEM_PROLOGUE();
    REQUIRE(name != NULL);
    unsigned count = fake_device_count(s, t);
    for (unsigned g = 0; g < count; g++) {
        if (!fake_device_present(s, g, t))
            continue;
        for (int k = 0; k < FAKE_MAX_PROCS; k++) {
            if (!(s->gpu[g].proc_mask & (1ull << k)))
                continue;
            char suffix[48];
            unsigned long long p;
            snprintf(suffix, sizeof suffix, "process.%d.pid", k);
            if (!fake_gpu_u64(s, (int)g, t, suffix, &p) || p != pid)
                continue;
            snprintf(suffix, sizeof suffix, "process.%d.name", k);
            const char *v = fake_gpu_str(s, (int)g, suffix);
            if (v != NULL)
                return fake_copy_str(name, length, v);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------------------------------ */
/* Enumeration                                                                                */

static nvmlReturn_t device_count(const char *sym, unsigned int *deviceCount)
{
    const struct fake_scenario *s;
    double t;
    nvmlReturn_t r = fake_system_prologue(sym, &s, &t);
    if (r != NVML_SUCCESS)
        return r;
    REQUIRE(deviceCount != NULL);
    *deviceCount = fake_device_count(s, t);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    return device_count(__func__, deviceCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return device_count(__func__, deviceCount);
}

/* A device-level call keyed by index, so gpuN.error/delay.nvmlDeviceGetHandleByIndex apply. */
static nvmlReturn_t handle_by_index(const char *sym, unsigned int index, nvmlDevice_t *device)
{
    struct fake_call c;
    nvmlReturn_t r = fake_prologue(&c, sym, index < FAKE_MAX_GPUS ? (int)index : -1, -1, FAKE_BY_INDEX);
    if (r != NVML_SUCCESS)
        return r;
    REQUIRE(device != NULL);
    *device = fake_handle(c.gpu, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index(__func__, index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return handle_by_index(__func__, index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    SYSTEM_PROLOGUE();
    REQUIRE(uuid != NULL && device != NULL);
    unsigned count = fake_device_count(s, t);
    for (unsigned g = 0; g < count; g++) {
        if (!fake_device_present(s, g, t))
            continue;
        char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        for (int k = -1; k < FAKE_MAX_MIG; k++) {
            if (k >= 0 && !(s->gpu[g].mig_mask & (1u << k)))
                continue;
            fake_uuid(s, (int)g, k, buf, sizeof buf);
            if (strcmp(buf, uuid) == 0) {
                *device = fake_handle((int)g, k);
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t handle_by_bus_id(const char *sym, const char *busId, nvmlDevice_t *device)
{
    const struct fake_scenario *s;
    double t;
    nvmlReturn_t r = fake_system_prologue(sym, &s, &t);
    if (r != NVML_SUCCESS)
        return r;
    REQUIRE(busId != NULL && device != NULL);
    unsigned want[4], have[4];
    bool parsed = fake_parse_bus_id(busId, &want[0], &want[1], &want[2], &want[3]);
    unsigned count = fake_device_count(s, t);
    for (unsigned g = 0; g < count; g++) {
        if (!fake_device_present(s, g, t))
            continue;
        char buf[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        fake_pci_bus_id(s, (int)g, buf, sizeof buf);
        bool match = parsed && fake_parse_bus_id(buf, &have[0], &have[1], &have[2], &have[3])
                         ? memcmp(want, have, sizeof want) == 0
                         : strcasecmp(buf, busId) == 0;
        if (match) {
            *device = fake_handle((int)g, -1);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return handle_by_bus_id(__func__, pciBusId, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return handle_by_bus_id(__func__, pciBusId, device);
}

/* ------------------------------------------------------------------------------------------ */
/* Events: Xids from gpuN.xid = "code@seconds, ..." are delivered once each, when due.       */

#define FAKE_EVENT_SET_MAGIC 0x4e564d4cu
#define FAKE_SUPPORTED_EVENTS                                                                     \
    (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | \
     nvmlEventTypePState | nvmlEventTypeClock)

struct nvmlEventSet_st {
    unsigned magic;                           /* cleared by nvmlEventSetFree */
    unsigned long long mask[FAKE_MAX_GPUS];   /* guarded by g_event_mu */
};

struct delivered {
    int gpu;
    unsigned long long code;
    long long due_us;
};

static pthread_mutex_t g_event_mu = PTHREAD_MUTEX_INITIALIZER;
/* Bumped (under g_event_mu) when a registration or a delivery changes what a wait may deliver. */
static unsigned long long g_event_generation;
static struct delivered *g_delivered; /* every Xid ever delivered, across re-reads */
static size_t g_n_delivered;

static bool was_delivered(int gpu, unsigned long long code, long long due_us)
{
    for (size_t i = 0; i < g_n_delivered; i++)
        if (g_delivered[i].gpu == gpu && g_delivered[i].code == code && g_delivered[i].due_us == due_us)
            return true;
    return false;
}

nvmlReturn_t DECLDIR nvmlEventSetCreate(nvmlEventSet_t *set)
{
    SYSTEM_PROLOGUE();
    (void)s;
    (void)t;
    REQUIRE(set != NULL);
    struct nvmlEventSet_st *es = calloc(1, sizeof *es);
    if (es == NULL)
        return NVML_ERROR_MEMORY;
    es->magic = FAKE_EVENT_SET_MAGIC;
    *set = es;
    return NVML_SUCCESS;
}

/* Sets are never freed, only marked dead, so a wait racing with a free cannot touch freed memory. */
nvmlReturn_t DECLDIR nvmlEventSetFree(nvmlEventSet_t set)
{
    SYSTEM_PROLOGUE();
    (void)s;
    (void)t;
    REQUIRE(set != NULL);
    pthread_mutex_lock(&g_event_mu);
    nvmlReturn_t r = set->magic == FAKE_EVENT_SET_MAGIC ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_unlock(&g_event_mu);
    return r;
}

nvmlReturn_t DECLDIR nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(eventTypes != NULL);
    *eventTypes = FAKE_SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(set != NULL);
    if (eventTypes & ~(unsigned long long)FAKE_SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_event_mu);
    nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
    if (set->magic == FAKE_EVENT_SET_MAGIC) {
        set->mask[c.gpu] |= eventTypes;
        g_event_generation++;
        r = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&g_event_mu);
    return r;
}

/* Earliest undelivered Xid of a GPU registered on set for Xids; caller holds g_event_mu. With
 * `due_only`, only one due by t of a present GPU (the one to deliver); without, whenever (when the next
 * one may be due: a wait need not look before). A GPU with `lost_after` posts the Xids due up to the
 * instant of its loss, and they wait in the set after it, as a driver posts Xid 79 while the GPU falls
 * off the bus; one due after the loss is never posted. */
static bool next_xid(const struct nvmlEventSet_st *set, const struct fake_scenario *s, double t, bool due_only,
                     int *gpu_out, unsigned long long *code_out, long long *due_out)
{
    bool found = false;
    unsigned count = due_only ? fake_device_count(s, t) : FAKE_MAX_GPUS;
    for (unsigned g = 0; g < count; g++) {
        if (!(set->mask[g] & nvmlEventTypeXidCriticalError))
            continue;
        if (due_only && !fake_device_present(s, g, t))
            continue;
        double lost;
        bool loses = fake_gpu_f64(s, (int)g, t, "lost_after", &lost);
        const char *list = fake_gpu_str(s, (int)g, "xid");
        if (list == NULL)
            continue;
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", list);
        char *save = NULL;
        for (char *item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
            char *at = strchr(item, '@');
            unsigned long long code;
            double when;
            if (at == NULL) {
                fake_warn_once("xid", list, "an item is not code@seconds; it is ignored");
                continue;
            }
            *at = '\0';
            if (!fake_value_u64("xid code", item, 0, &code) || !fake_value_f64("xid time", at + 1, 0, &when))
                continue;
            long long due_us = (long long)(when * 1e6);
            if ((due_only && when > t) || (loses && when > lost) || was_delivered((int)g, code, due_us))
                continue;
            if (!found || due_us < *due_out) {
                found = true;
                *gpu_out = (int)g;
                *code_out = code;
                *due_out = due_us;
            }
        }
    }
    return found;
}

/* A real driver's wait sleeps in the kernel until an event or the timeout; each wake-up costs the
 * waiting process CPU a real driver does not (tens of µs on a VM). The fake sleeps until the next Xid
 * falls due, the timeout, or a change of the scenario file (an inotify watch), whichever is first;
 * where no watch can be set it wakes every slice, so a rewritten scenario is noticed at most a slice
 * late. */
#define FAKE_EVENT_SLICE_S 0.25
/* How soon a wait looks again while the earliest undelivered Xid is already due but was not delivered. */
#define FAKE_EVENT_RECHECK_S 0.05

/* Waits in slices, holding no lock while asleep, so Xids that fall due and scenario rewrites are
 * noticed while other threads keep calling. The registered GPUs' Xid lists are scanned again only
 * when the scenario, a registration or a delivery changed, or when the earliest undelivered Xid may
 * be due: a slice with nothing due costs a clock and a stat. */
static nvmlReturn_t event_wait(const char *sym, nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    const struct fake_scenario *s0;
    double t0;
    nvmlReturn_t r = fake_system_prologue(sym, &s0, &t0);
    if (r != NVML_SUCCESS)
        return r;
    REQUIRE(set != NULL && data != NULL);
    double deadline = fake_now_mono() + timeoutms / 1000.0;
    const struct fake_scenario *scanned = NULL; /* the scenario next_at was found in */
    unsigned long long scanned_generation = 0;
    double next_at = 0; /* seconds since init before which no Xid can be due; 1e300: none */
    for (;;) {
        const struct fake_scenario *s = fake_scenario_now();
        double t = fake_elapsed();
        int gpu = -1;
        unsigned long long code = 0;
        long long due = 0;
        pthread_mutex_lock(&g_event_mu);
        bool alive = set->magic == FAKE_EVENT_SET_MAGIC;
        if (alive && (s != scanned || g_event_generation != scanned_generation)) {
            next_at = next_xid(set, s, t, false, &gpu, &code, &due) ? (double)(due - 1) / 1e6 : 1e300;
            scanned = s;
            scanned_generation = g_event_generation;
        }
        bool found = alive && t >= next_at && next_xid(set, s, t, true, &gpu, &code, &due);
        if (found) {
            g_event_generation++;
            struct delivered *grown = realloc(g_delivered, (g_n_delivered + 1) * sizeof *grown);
            if (grown != NULL) {
                g_delivered = grown;
                g_delivered[g_n_delivered++] = (struct delivered){gpu, code, due};
            }
        }
        pthread_mutex_unlock(&g_event_mu);
        if (!alive)
            return NVML_ERROR_INVALID_ARGUMENT;
        if (found) {
            memset(data, 0, sizeof *data);
            data->device = fake_handle(gpu, -1);
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = code;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
        double left = deadline - fake_now_mono();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        double slice = next_at - fake_elapsed(); /* wake when the next Xid falls due ... */
        if (slice <= 0)
            slice = FAKE_EVENT_RECHECK_S; /* due but not deliverable now (an absent GPU's): no spin */
        else if (slice > left)
            slice = left;
        if (slice > FAKE_EVENT_RECHECK_S && fake_sleep_unless_changed(s, slice))
            continue; /* ... or when the scenario file changes */
        if (slice > FAKE_EVENT_SLICE_S)
            slice = FAKE_EVENT_SLICE_S; /* without a watch: a slice later, to notice a rewritten scenario */
        fake_sleep(slice);
    }
}

nvmlReturn_t DECLDIR nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(__func__, set, data, timeoutms);
}

nvmlReturn_t DECLDIR nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(__func__, set, data, timeoutms);
}
