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

/* fakenvml.h: what the fake's source files share (not installed, not part of the NVML ABI). */
#ifndef FAKENVML_H
#define FAKENVML_H

/* clock_gettime, nanosleep, st_mtim, strdup, strcasecmp under -std=c11. */
#define _POSIX_C_SOURCE 200809L

/* Keep the legacy names un-renamed so both nvmlFoo and nvmlFoo_v2 can be defined and type-checked. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_MAX_GPUS 64
#define FAKE_MAX_MIG 8      /* mig.K for K < 8 (real GPUs have at most 7 MIG devices) */
#define FAKE_MAX_PROCS 64   /* process.K for K < 64 */
#define FAKE_MAX_LINKS NVML_NVLINK_MAX_LINKS

/* What broken drivers have been seen to return (gpuN.absurd = 1). */
#define FAKE_ABSURD_TEMPERATURE 644245923u
#define FAKE_ABSURD_UTILIZATION 4294967295u

/* Device handles are addresses inside two static arrays; the index is the offset, so a handle
 * stays valid for the life of the process and needs no allocation. */
struct nvmlDevice_st {
    unsigned char unused;
};

struct fake_entry {
    const char *key;
    const char *val;
    unsigned line;
};

/* What the parser learned about gpuN from its keys (values are evaluated per call, since they cycle). */
struct fake_gpu {
    bool has_keys;
    uint32_t mig_mask;   /* bit K: some gpuN.mig.K.* key exists */
    uint64_t proc_mask;  /* bit K: gpuN.process.K.pid exists */
    uint64_t link_mask;  /* bit L: some gpuN.nvlink.L.* key exists */
};

/* File identity used to notice a rewrite: device, inode, size and nanosecond mtime. */
struct fake_stamp {
    bool exists;
    unsigned long long dev, ino;
    long long size, mtime_sec, mtime_nsec;
};

/* One parsed scenario. Immutable once published, and never freed, so a reader can keep using
 * the one it loaded while another thread publishes a newer one. */
struct fake_scenario {
    const char *path;             /* NULL when FAKE_NVML_SCENARIO was unset */
    struct fake_stamp stamp;
    struct fake_entry *entries;   /* sorted by key, unique */
    size_t n_entries;
    unsigned distinct_gpus;       /* default device_count */
    struct fake_gpu gpu[FAKE_MAX_GPUS];
};

/* The state a device-level entry point works with after its prologue. */
struct fake_call {
    const struct fake_scenario *s;
    double t;     /* seconds since the first successful nvmlInit* */
    int gpu;      /* parent index */
    int mig;      /* MIG index K, or -1 for a whole GPU */
};

/* Helpers shared between the source files stay out of the library's dynamic symbol table,
 * which exports only nvml* entry points. */
#pragma GCC visibility push(hidden)

/* --- scenario.c: scenario, time, trace, prologue --- */
void fake_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fake_warn_once(const char *key, const char *val, const char *why); /* once per key=value */
void fake_trace(const char *sym, int gpu);
/* nvmlDeviceGetSamples' line: `SYMBOL gpuN type=T n=N last=TS` (the sampling type, the samples handed
 * out, the newest one's timestamp in µs or 0). */
void fake_trace_samples(const char *sym, int gpu, unsigned type, unsigned n, unsigned long long last);
void fake_sleep(double seconds);
double fake_now_mono(void);
unsigned long long fake_now_us(void);       /* wall clock, microseconds since 1970 */

nvmlReturn_t fake_init(void);
nvmlReturn_t fake_shutdown(void);
bool fake_initialized(void);
double fake_elapsed(void);
const struct fake_scenario *fake_scenario_now(void);   /* re-reads the file if it changed */
/* Sleeps up to `seconds` or until the scenario file (seen->path) is rewritten, replaced, touched or
 * removed: an inotify watch on its folder, as a real driver's waits sleep in the kernel. False, having
 * slept not at all, where no watch can be set (no file, no inotify): the caller sleeps in slices. */
bool fake_sleep_unless_changed(const struct fake_scenario *seen, double seconds);

const char *fake_get(const struct fake_scenario *s, const char *key);
/* The period of a cycling value "a,b,c@P" in seconds, 0 when it does not cycle. */
double fake_cycle_period(const char *val);
/* The end of the cycle step holding µs time from, or t1 (see scenario.c). */
unsigned long long fake_cycle_step_end(double period, unsigned long long from, unsigned long long t1);
bool fake_value_u64(const char *key, const char *val, double t, unsigned long long *out);
bool fake_value_f64(const char *key, const char *val, double t, double *out);
nvmlReturn_t fake_value_error(const char *key, const char *val, double t);
const char *fake_error_text(nvmlReturn_t r);

unsigned fake_device_count(const struct fake_scenario *s, double t);
bool fake_device_present(const struct fake_scenario *s, unsigned gpu, double t);

nvmlDevice_t fake_handle(int gpu, int mig);
void fake_decode_handle(nvmlDevice_t dev, int *gpu, int *mig);

/* Prologue flags. */
#define FAKE_MIG_OK 1u     /* the call is meaningful on a MIG handle */
#define FAKE_BY_INDEX 2u   /* gpu came from an index argument: out of range is INVALID_ARGUMENT */
#define FAKE_NO_TRACE 4u   /* the entry point writes its own trace line (after the call) */

nvmlReturn_t fake_prologue(struct fake_call *c, const char *sym, int gpu, int mig, unsigned flags);
nvmlReturn_t fake_system_prologue(const char *sym, const struct fake_scenario **s, double *t);
nvmlReturn_t fake_entry_fault(struct fake_call *c, const char *sym);
/* The energy counter (samples.c): `energy` plus the integral of `power.usage` since init, mJ. */
nvmlReturn_t fake_energy(const struct fake_call *c, unsigned long long *mj);
/* A field-only value (fields_only.c): true when ``f``'s id is one, with its answer in ``*r``. */
bool fake_field_only(const struct fake_call *c, nvmlFieldValue_t *f, nvmlReturn_t *r);
/* An NVLink5 counter, the NVLink ECC total or a C2C field (links.c): true when ``f``'s id is one. */
bool fake_link_field(const struct fake_call *c, nvmlFieldValue_t *f, nvmlReturn_t *r);

/* Common start of every device-level entry point: trace, init, reload, handle, delay, lost, error. */
#define DEVICE_PROLOGUE(dev, flags)                                              \
    struct fake_call c;                                                          \
    do {                                                                         \
        int gpu_, mig_;                                                          \
        fake_decode_handle((dev), &gpu_, &mig_);                                 \
        nvmlReturn_t r_ = fake_prologue(&c, __func__, gpu_, mig_, (flags));      \
        if (r_ != NVML_SUCCESS)                                                  \
            return r_;                                                           \
    } while (0)

/* Common start of every entry point that is not about one device: trace, init, reload, and the
 * host-level delay.F and error.F keys. */
#define SYSTEM_PROLOGUE()                                                        \
    const struct fake_scenario *s;                                               \
    double t;                                                                    \
    do {                                                                         \
        nvmlReturn_t r_ = fake_system_prologue(__func__, &s, &t);                \
        if (r_ != NVML_SUCCESS)                                                  \
            return r_;                                                           \
    } while (0)

#define REQUIRE(cond)                                                            \
    do {                                                                         \
        if (!(cond))                                                             \
            return NVML_ERROR_INVALID_ARGUMENT;                                  \
    } while (0)

/* Per-device key lookups: the key is "gpuN." + the formatted suffix. */
const char *fake_dev_str(const struct fake_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool fake_dev_u64(const struct fake_call *c, unsigned long long *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool fake_dev_f64(const struct fake_call *c, double *out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Same for an arbitrary gpu index at time t (used by system-level code). */
const char *fake_gpu_str(const struct fake_scenario *s, int gpu, const char *suffix);
bool fake_gpu_u64(const struct fake_scenario *s, int gpu, double t, const char *suffix, unsigned long long *out);
bool fake_gpu_f64(const struct fake_scenario *s, int gpu, double t, const char *suffix, double *out);

/* *out = value of gpuN.<key>, or NOT_SUPPORTED when the key is absent. */
nvmlReturn_t fake_uint(const struct fake_call *c, unsigned int *out, const char *key);
nvmlReturn_t fake_ull(const struct fake_call *c, unsigned long long *out, const char *key);
nvmlReturn_t fake_copy_str(char *buf, unsigned int length, const char *value);

/* Identity strings with their defaults, shared by the getters and the handle look-ups. */
void fake_uuid(const struct fake_scenario *s, int gpu, int mig, char *buf, size_t size);
void fake_pci_bus_id(const struct fake_scenario *s, int gpu, char *buf, size_t size);
bool fake_parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *device, unsigned *function);

#pragma GCC visibility pop

#endif
