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


/* samples.c: the driver's sample buffers (nvmlDeviceGetSamples) and its energy counter
 * (nvmlDeviceGetTotalEnergyConsumption), as nvml.h describes them and as an H200 on driver 580.159.04
 * answered them (measured; SCENARIO.md lists what was seen).
 *
 * The driver samples each quantity on its own, at its own period, into a bounded ring per GPU per
 * type, full from the start (it was loaded before the program); nvmlDeviceGetSamples hands out the
 * samples newer than lastSeenTimeStamp, oldest first, stamped in wall-clock µs. A utilisation sample
 * is the percent of its period the engine was busy: here the mean of the scenario's value over
 * (T - period, T] (a cycle integrated step by step; before init, the value at init), truncated; a power
 * or clock sample is the value at T. Samples are materialised when a call asks, for every period
 * boundary since the previous call (at most the ring's size: older ones were overwritten), so they
 * take the scenario of that call. The energy counter is the scenario's `energy` (the millijoules
 * counted before the program started) plus the integral of `power.usage` (mW) since init, a cycle
 * integrated step by step: exact, as the real counter.
 */

#include "fakenvml.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RING_MAX 128

/* Per sampling type: scenario key, period (µs) and samples kept (the NULL call answers one more).
 * Measured: utilisation (GPU, memory, encoder, decoder, and JPG/OFA, not modelled) every 200 ms, 71
 * kept (14 s); board power every ~20 ms, 119 kept (2.4 s); SM and memory clock buffers empty (the
 * NULL call answers 100, a buffer NOT_FOUND): the fake keeps them only with gpuN.samples.clocks = 1,
 * at the utilisation's pace (not measured). */
static const struct {
    const char *key;
    const char *name; /* the nvmlSamplingType_t name, lower case, without NVML_ and _SAMPLES */
    unsigned long long period_us;
    unsigned ring;
    bool utilization; /* a busy percent over the period; not supported on a GPU in MIG mode (nvml.h's note) */
    bool clock;       /* kept only with gpuN.samples.clocks = 1 */
} k_types[NVML_SAMPLINGTYPE_COUNT] = {
    [NVML_TOTAL_POWER_SAMPLES] = {"power.usage", "total_power", 20000, 119, false, false},
    [NVML_GPU_UTILIZATION_SAMPLES] = {"utilization.gpu", "gpu_utilization", 200000, 71, true, false},
    [NVML_MEMORY_UTILIZATION_SAMPLES] = {"utilization.memory", "memory_utilization", 200000, 71, true, false},
    [NVML_ENC_UTILIZATION_SAMPLES] = {"utilization.encoder", "enc_utilization", 200000, 71, true, false},
    [NVML_DEC_UTILIZATION_SAMPLES] = {"utilization.decoder", "dec_utilization", 200000, 71, true, false},
    [NVML_PROCESSOR_CLK_SAMPLES] = {"clock.sm", "processor_clk", 200000, 71, false, true},
    [NVML_MEMORY_CLK_SAMPLES] = {"clock.memory", "memory_clk", 200000, 71, false, true},
    /* NVML_MODULE_POWER_SAMPLES: INVALID_ARGUMENT (measured on H200, not a Grace Hopper); NVJPG and
     * NVOFA: no scenario key, NOT_SUPPORTED */
};
#define EMPTY_CLOCK_COUNT 100u /* what the NULL call answers for an empty clock buffer (measured) */

struct ring {
    bool started;
    long long next_k; /* the next period index to materialise (sample k is stamped epoch + k x period) */
    unsigned n, head; /* samples kept; index of the oldest */
    nvmlSample_t s[RING_MAX];
};

struct energy {
    bool started;
    unsigned long long t_us;
    double acc_mj;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring g_rings[FAKE_MAX_GPUS][NVML_SAMPLINGTYPE_COUNT];
static struct energy g_energy[FAKE_MAX_GPUS];
static unsigned long long g_epoch_us; /* wall-clock µs at init (the scenario clock's 0) */

static unsigned long long to_us(double t)
{
    return (unsigned long long)(t * 1e6 + 0.5);
}

/* gpuN.samples.unsupported = name,name,...: the driver keeps no buffer of these types. */
static bool listed_unsupported(const struct fake_call *c, const char *name)
{
    const char *list = fake_dev_str(c, "samples.unsupported");
    if (list == NULL)
        return false;
    size_t len = strlen(name);
    for (const char *p = list; *p != '\0';) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end != '\0' && *end != ',' && *end != ' ')
            end++;
        if ((size_t)(end - p) == len && strncasecmp(p, name, len) == 0)
            return true;
        p = end;
    }
    return false;
}

/* The mean of a value over (t0, t1] seconds (t0 >= 0), a cycle step by step; false when absent. */
static bool window_mean(const char *key, const char *val, double t0, double t1, double *out)
{
    double period = fake_cycle_period(val);
    double sum = 0, from = t0;
    while (from < t1) {
        double to = t1;
        if (period > 0) {
            double boundary = (double)((long long)(from / period + 1e-9) + 1) * period;
            if (boundary > from && boundary < t1)
                to = boundary;
        }
        double level;
        if (!fake_value_f64(key, val, (from + to) / 2, &level))
            return false;
        sum += level * (to - from);
        from = to;
    }
    *out = t1 > t0 ? sum / (t1 - t0) : 0;
    return true;
}

static void materialise(const struct fake_call *c, unsigned type, struct ring *ring, unsigned long long now_us)
{
    long long period = (long long)k_types[type].period_us, k_now = (long long)(now_us / (unsigned long long)period);
    unsigned size = k_types[type].ring;
    char key[64];
    snprintf(key, sizeof key, "gpu%d.%s", c->gpu, k_types[type].key);
    const char *val = fake_get(c->s, key);
    unsigned long long a = 0; /* gpuN.absurd: utilisation samples read 4294967295, as the point reads */
    bool absurd = k_types[type].utilization && fake_dev_u64(c, &a, "absurd") && a != 0;
    if (!ring->started) {
        ring->started = true;
        ring->next_k = k_now - (long long)size + 1; /* a full ring at the first call */
    }
    if (ring->next_k < k_now - (long long)size + 1)
        ring->next_k = k_now - (long long)size + 1; /* older ones would have been overwritten */
    for (long long k = ring->next_k; k <= k_now; k++) {
        unsigned long long ts = (unsigned long long)((long long)g_epoch_us + k * period);
        double end = k > 0 ? (double)(k * period) / 1e6 : 0.0; /* before init: the value at init */
        double start = end - (double)period / 1e6 > 0 ? end - (double)period / 1e6 : 0.0;
        unsigned long long v;
        double mean;
        if (absurd) {
            v = FAKE_ABSURD_UTILIZATION;
        } else if (val == NULL) {
            continue;
        } else if (k_types[type].utilization && end > start) {
            if (!window_mean(key, val, start, end, &mean) || mean < 0)
                continue;
            v = (unsigned long long)(mean + 1e-6); /* truncated; 1e-6 absorbs the sum's rounding */
        } else if (!fake_value_u64(key, val, end, &v)) {
            continue;
        }
        if (ring->n == size) {
            ring->head = (ring->head + 1) % size;
            ring->n--;
        }
        nvmlSample_t *slot = &ring->s[(ring->head + ring->n) % size];
        slot->timeStamp = ts;
        slot->sampleValue.uiVal = (unsigned)v;
        ring->n++;
    }
    if (k_now + 1 > ring->next_k)
        ring->next_k = k_now + 1;
}

/* nvmlDeviceGetSamples without its trace line (the entry point below writes it, with the count). */
static nvmlReturn_t get_samples(nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeenTimeStamp,
                                nvmlValueType_t *sampleValType, unsigned int *sampleCount, nvmlSample_t *samples)
{
    struct fake_call c;
    int gpu_, mig_;
    fake_decode_handle(device, &gpu_, &mig_);
    nvmlReturn_t r_ = fake_prologue(&c, "nvmlDeviceGetSamples", gpu_, mig_, FAKE_NO_TRACE);
    if (r_ != NVML_SUCCESS)
        return r_;
    REQUIRE(sampleCount != NULL && sampleValType != NULL);
    REQUIRE(samples == NULL || *sampleCount != 0);
    if ((unsigned)type >= NVML_SAMPLINGTYPE_COUNT || type == NVML_MODULE_POWER_SAMPLES)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (k_types[type].key == NULL || fake_dev_str(&c, "%s", k_types[type].key) == NULL ||
        listed_unsupported(&c, k_types[type].name))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long flag = 0;
    if (k_types[type].utilization && fake_dev_u64(&c, &flag, "mig.mode") && flag != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (k_types[type].clock && !(fake_dev_u64(&c, &flag, "samples.clocks") && flag != 0)) {
        if (samples != NULL)
            return NVML_ERROR_NOT_FOUND; /* an empty clock buffer */
        *sampleCount = EMPTY_CLOCK_COUNT;
        return NVML_SUCCESS;
    }
    pthread_mutex_lock(&g_lock);
    if (g_epoch_us == 0)
        g_epoch_us = fake_now_us() - to_us(c.t);
    struct ring *ring = &g_rings[c.gpu][type];
    materialise(&c, (unsigned)type, ring, to_us(c.t));
    unsigned size = k_types[type].ring, first = 0;
    if (samples == NULL) { /* the ring's size plus one, whatever lastSeenTimeStamp (measured) */
        *sampleCount = size + 1;
        pthread_mutex_unlock(&g_lock);
        return NVML_SUCCESS;
    }
    while (first < ring->n && ring->s[(ring->head + first) % size].timeStamp <= lastSeenTimeStamp)
        first++;
    unsigned available = ring->n - first;
    if (available == 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_NOT_FOUND;
    }
    unsigned n = *sampleCount < available ? *sampleCount : available; /* the oldest first (measured) */
    for (unsigned i = 0; i < n; i++)
        samples[i] = ring->s[(ring->head + first + i) % size];
    *sampleCount = n;
    pthread_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
}

/* Traced as `nvmlDeviceGetSamples gpuN type=T n=N last=TS`: the sampling type, the samples handed out
 * (0 for the size query, NOT_FOUND or an error) and the newest one's timestamp (µs, 0 when none), so a
 * trace accounts for every driver sample seen and the span of driver time they cover. */
nvmlReturn_t DECLDIR nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeenTimeStamp,
                                          nvmlValueType_t *sampleValType, unsigned int *sampleCount, nvmlSample_t *samples)
{
    nvmlReturn_t r = get_samples(device, type, lastSeenTimeStamp, sampleValType, sampleCount, samples);
    int gpu, mig;
    fake_decode_handle(device, &gpu, &mig);
    unsigned n = r == NVML_SUCCESS && samples != NULL && sampleCount != NULL ? *sampleCount : 0;
    fake_trace_samples(__func__, gpu, (unsigned)type, n, n > 0 ? samples[n - 1].timeStamp : 0);
    return r;
}

/* The integral of `power.usage` (mW) over [t0, t1] µs, in mJ; a cycle is integrated step by step. */
static double power_integral(const struct fake_call *c, unsigned long long t0, unsigned long long t1)
{
    char key[48];
    snprintf(key, sizeof key, "gpu%d.power.usage", c->gpu);
    const char *val = fake_get(c->s, key);
    if (val == NULL)
        return 0.0;
    double period = fake_cycle_period(val);
    double sum = 0;
    unsigned long long from = t0;
    while (from < t1) {
        unsigned long long to = fake_cycle_step_end(period, from, t1);
        unsigned long long mw;
        if (fake_value_u64(key, val, ((double)from + (double)to) / 2e6, &mw))
            sum += (double)mw * (double)(to - from) / 1e6;
        from = to;
    }
    return sum;
}

nvmlReturn_t fake_energy(const struct fake_call *c, unsigned long long *mj)
{
    unsigned long long base;
    if (!fake_dev_u64(c, &base, "energy"))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long now = to_us(c->t);
    pthread_mutex_lock(&g_lock);
    struct energy *e = &g_energy[c->gpu];
    if (!e->started) {
        e->started = true;
        e->t_us = 0;
    }
    if (now > e->t_us) {
        e->acc_mj += power_integral(c, e->t_us, now);
        e->t_us = now;
    }
    *mj = base + (unsigned long long)e->acc_mj;
    pthread_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
}
