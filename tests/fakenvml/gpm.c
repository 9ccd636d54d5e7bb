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


/* gpm.c: GPU Performance Monitoring (Hopper and later): sample buffers, samples of a GPU or of a MIG
 * GPU instance, and metrics computed from two samples, as nvml.h describes them.
 *
 * The scenario gives each metric's level: gpuN.gpm.<name> (a GPU) or gpuN.mig.K.gpm.<name> (the GPU
 * instance of MIG device K), in the metric's own unit (percent, or MiB/s), cycles allowed. Like the
 * hardware, the fake keeps cumulative counters per GPU and per GPU instance: every nvmlGpmSampleGet
 * adds the integral of each level since that entity's previous sample (under the scenario of the
 * moment, cycle steps honoured) and copies the counters and the time into the buffer. nvmlGpmMetricsGet
 * divides the counters' difference by the time between the two samples: the level's mean over that
 * interval, exactly the level where it stayed constant. Counters are kept as milli-units x microseconds
 * in 128-bit integers, so a constant level comes back as the nearest double to its decimal value. */
#include "fakenvml.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPM_LIVE 0x47504d31u  /* "GPM1": an allocated buffer */
#define GPM_DEAD 0x47504d30u  /* freed: poisoned and never returned to malloc, so a double free or a use
                               * after free is INVALID_ARGUMENT instead of undefined behaviour */
#define GPM_SLOTS (FAKE_MAX_MIG + 1)  /* slot 0: the GPU; slot K + 1: the GPU instance of MIG device K */

typedef unsigned __int128 gpm_acc;

struct nvmlGpmSample_st {
    unsigned magic;
    bool filled;
    int gpu, slot;
    unsigned long long t_us;
    bool has[NVML_GPM_METRIC_MAX];     /* the metric's key existed at this sample */
    gpm_acc acc[NVML_GPM_METRIC_MAX];  /* cumulative milli-units x microseconds */
};

struct gpm_counters {
    bool started;
    unsigned long long t_us;
    gpm_acc acc[NVML_GPM_METRIC_MAX];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpm_counters g_counters[FAKE_MAX_GPUS][GPM_SLOTS];

static const char *const g_names[] = {
    [NVML_GPM_METRIC_GRAPHICS_UTIL] = "graphics_util",
    [NVML_GPM_METRIC_SM_UTIL] = "sm_util",
    [NVML_GPM_METRIC_SM_OCCUPANCY] = "sm_occupancy",
    [NVML_GPM_METRIC_INTEGER_UTIL] = "integer_util",
    [NVML_GPM_METRIC_ANY_TENSOR_UTIL] = "any_tensor_util",
    [NVML_GPM_METRIC_DFMA_TENSOR_UTIL] = "dfma_tensor_util",
    [NVML_GPM_METRIC_HMMA_TENSOR_UTIL] = "hmma_tensor_util",
    [NVML_GPM_METRIC_DMMA_TENSOR_UTIL] = "dmma_tensor_util",
    [NVML_GPM_METRIC_IMMA_TENSOR_UTIL] = "imma_tensor_util",
    [NVML_GPM_METRIC_DRAM_BW_UTIL] = "dram_bw_util",
    [NVML_GPM_METRIC_FP64_UTIL] = "fp64_util",
    [NVML_GPM_METRIC_FP32_UTIL] = "fp32_util",
    [NVML_GPM_METRIC_FP16_UTIL] = "fp16_util",
    [NVML_GPM_METRIC_PCIE_TX_PER_SEC] = "pcie_tx_per_sec",
    [NVML_GPM_METRIC_PCIE_RX_PER_SEC] = "pcie_rx_per_sec",
    [NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC] = "nvlink_total_rx_per_sec",
    [NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC] = "nvlink_total_tx_per_sec",
    [NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC] = "c2c_total_tx_per_sec",
    [NVML_GPM_METRIC_C2C_TOTAL_RX_PER_SEC] = "c2c_total_rx_per_sec",
    [NVML_GPM_METRIC_C2C_DATA_TX_PER_SEC] = "c2c_data_tx_per_sec",
    [NVML_GPM_METRIC_C2C_DATA_RX_PER_SEC] = "c2c_data_rx_per_sec",
};

/* The scenario name of metric id (see SCENARIO.md), or false for an id the fake does not model. */
static bool metric_name(unsigned id, char *buf, size_t size)
{
    if (id < sizeof g_names / sizeof g_names[0] && g_names[id] != NULL) {
        snprintf(buf, size, "%s", g_names[id]);
        return true;
    }
    struct { unsigned first, last; const char *fmt; unsigned base; } ranges[] = {
        {NVML_GPM_METRIC_NVDEC_0_UTIL, NVML_GPM_METRIC_NVDEC_7_UTIL, "nvdec_%u_util", 0},
        {NVML_GPM_METRIC_NVJPG_0_UTIL, NVML_GPM_METRIC_NVJPG_7_UTIL, "nvjpg_%u_util", 0},
        {NVML_GPM_METRIC_NVOFA_0_UTIL, NVML_GPM_METRIC_NVOFA_1_UTIL, "nvofa_%u_util", 0},
        {NVML_GPM_METRIC_NVENC_0_UTIL, NVML_GPM_METRIC_NVENC_3_UTIL, "nvenc_%u_util", 0},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (id >= ranges[i].first && id <= ranges[i].last) {
            snprintf(buf, size, ranges[i].fmt, id - ranges[i].first);
            return true;
        }
    /* Per-link NVLink rates come in (rx, tx) pairs: links 0-17, 18-35 and 36-71 in three blocks. */
    struct { unsigned first, last, link0; } links[] = {
        {NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC, 0},
        {NVML_GPM_METRIC_NVLINK_L18_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_L35_TX_PER_SEC, 18},
        {NVML_GPM_METRIC_NVLINK_L36_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_L71_TX_PER_SEC, 36},
    };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (id >= links[i].first && id <= links[i].last) {
            unsigned offset = id - links[i].first;
            snprintf(buf, size, "nvlink_l%u_%s_per_sec", links[i].link0 + offset / 2, offset % 2 ? "tx" : "rx");
            return true;
        }
    return false;
}

/* The raw value of the metric's key for slot (0: the GPU, K + 1: MIG device K), or NULL. */
static const char *metric_value(const struct fake_scenario *s, int gpu, int slot, unsigned id, char *key,
                                size_t size)
{
    char name[64];
    if (!metric_name(id, name, sizeof name))
        return NULL;
    if (slot == 0)
        snprintf(key, size, "gpu%d.gpm.%s", gpu, name);
    else
        snprintf(key, size, "gpu%d.mig.%d.gpm.%s", gpu, slot - 1, name);
    return fake_get(s, key);
}

static long long round_ll(double x)
{
    return (long long)(x < 0 ? x - 0.5 : x + 0.5);
}

/* The integral of a level over [t0, t1] µs, in milli-units x µs; a cycle is integrated step by step. */
static gpm_acc integral(const char *key, const char *val, unsigned long long t0, unsigned long long t1)
{
    double period = fake_cycle_period(val);
    gpm_acc sum = 0;
    unsigned long long from = t0;
    while (from < t1) {
        unsigned long long to = fake_cycle_step_end(period, from, t1);
        double level;
        if (fake_value_f64(key, val, ((double)from + (double)to) / 2e6, &level) && level > 0)
            sum += (gpm_acc)round_ll(level * 1000.0) * (to - from);
        from = to;
    }
    return sum;
}

static bool sample_ok(const struct nvmlGpmSample_st *sample)
{
    return sample != NULL && sample->magic == GPM_LIVE;
}

/* Add every level's integral since the entity's previous sample, then copy the counters into sample. */
static void take_sample(const struct fake_call *c, int slot, nvmlGpmSample_t sample)
{
    unsigned long long now = (unsigned long long)round_ll(c->t * 1e6);
    char key[96];
    pthread_mutex_lock(&g_lock);
    struct gpm_counters *counters = &g_counters[c->gpu][slot];
    if (!counters->started) {
        counters->started = true;
        counters->t_us = now;
    }
    unsigned long long since = counters->t_us < now ? counters->t_us : now;
    for (unsigned id = 0; id < NVML_GPM_METRIC_MAX; id++) {
        const char *val = metric_value(c->s, c->gpu, slot, id, key, sizeof key);
        sample->has[id] = val != NULL;
        if (val != NULL)
            counters->acc[id] += integral(key, val, since, now);
        sample->acc[id] = counters->acc[id];
    }
    counters->t_us = now > counters->t_us ? now : counters->t_us;
    sample->t_us = now;
    sample->gpu = c->gpu;
    sample->slot = slot;
    sample->filled = true;
    pthread_mutex_unlock(&g_lock);
}

nvmlReturn_t DECLDIR nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    SYSTEM_PROLOGUE();
    (void)s;
    (void)t;
    REQUIRE(gpmSample != NULL);
    nvmlGpmSample_t sample = calloc(1, sizeof *sample);
    if (sample == NULL)
        return NVML_ERROR_MEMORY;
    sample->magic = GPM_LIVE;
    *gpmSample = sample;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    fake_trace(__func__, -1);
    REQUIRE(sample_ok(gpmSample));
    gpmSample->magic = GPM_DEAD;
    return NVML_SUCCESS;
}

/* gpuN.gpm_supported must be 1, as for nvmlGpmQueryDeviceSupport; a MIG handle samples its GPU instance. */
nvmlReturn_t DECLDIR nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(sample_ok(gpmSample));
    unsigned long long supported;
    if (!fake_dev_u64(&c, &supported, "gpm_supported") || supported == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    take_sample(&c, c.mig + 1, gpmSample);
    return NVML_SUCCESS;
}

/* The GPU instance gpuInstanceId of a GPU in MIG mode: the MIG device K whose mig.K.gpu_instance_id it is. */
nvmlReturn_t DECLDIR nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(sample_ok(gpmSample));
    unsigned long long supported, mode, id;
    if (!fake_dev_u64(&c, &supported, "gpm_supported") || supported == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!fake_dev_u64(&c, &mode, "mig.mode") || mode == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    for (int k = 0; k < FAKE_MAX_MIG; k++)
        if ((c.s->gpu[c.gpu].mig_mask >> k & 1u) && fake_dev_u64(&c, &id, "mig.%d.gpu_instance_id", k) &&
            id == gpuInstanceId) {
            take_sample(&c, k + 1, gpmSample);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

/* Each metric: (counter at sample2 - counter at sample1) / (time between them). Both samples must be of
 * the same GPU or GPU instance, sample2 the later; an id the fake does not model, or whose key was
 * absent at sample2, gets NOT_SUPPORTED in its own nvmlReturn. */
nvmlReturn_t DECLDIR nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    SYSTEM_PROLOGUE();
    (void)s;
    (void)t;
    REQUIRE(metricsGet != NULL);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    REQUIRE(metricsGet->numMetrics <= NVML_GPM_METRIC_MAX);
    const struct nvmlGpmSample_st *one = metricsGet->sample1, *two = metricsGet->sample2;
    REQUIRE(sample_ok(one) && sample_ok(two) && one->filled && two->filled);
    REQUIRE(one->gpu == two->gpu && one->slot == two->slot && two->t_us > one->t_us);
    unsigned long long span = two->t_us - one->t_us;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        unsigned id = metric->metricId;
        metric->value = 0;
        metric->metricInfo.shortName = metric->metricInfo.longName = metric->metricInfo.unit = NULL;
        if (id >= NVML_GPM_METRIC_MAX || !two->has[id]) {
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        gpm_acc delta = two->acc[id] >= one->acc[id] ? two->acc[id] - one->acc[id] : 0;
        if (delta % span == 0)
            metric->value = (double)(unsigned long long)(delta / span) / 1000.0;
        else
            metric->value = (double)((long double)delta / (long double)span / 1000.0L);
        metric->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}
