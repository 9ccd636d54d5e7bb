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

/* scenario.c: the scenario file (parse, reload on change, typed look-ups), the time base, the
 * call trace, device handles and the prologue every entry point runs first. */
#include "fakenvml.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Warnings, clocks, sleeping                                                                  */

void fake_warn(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakenvml: %s\n", buf);
}

/* Values are looked up on every call, so a bad one would otherwise warn thousands of times. */
static pthread_mutex_t g_warned_mu = PTHREAD_MUTEX_INITIALIZER;
static char **g_warned;
static size_t g_n_warned;

void fake_warn_once(const char *key, const char *val, const char *why)
{
    char id[512];
    snprintf(id, sizeof id, "%s=%s", key, val);
    pthread_mutex_lock(&g_warned_mu);
    bool seen = false;
    for (size_t i = 0; i < g_n_warned && !seen; i++)
        seen = strcmp(g_warned[i], id) == 0;
    if (!seen) {
        char **grown = realloc(g_warned, (g_n_warned + 1) * sizeof *grown);
        if (grown != NULL) {
            g_warned = grown;
            g_warned[g_n_warned] = strdup(id);
            if (g_warned[g_n_warned] != NULL)
                g_n_warned++;
        }
    }
    pthread_mutex_unlock(&g_warned_mu);
    if (!seen)
        fake_warn("%s = %s: %s", key, val, why);
}

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double fake_now_mono(void)
{
    return (double)mono_ns() / 1e9;
}

unsigned long long fake_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

void fake_sleep(double seconds)
{
    if (!(seconds > 0))
        return;
    if (seconds > 1e9)
        seconds = 1e9;
    struct timespec ts = {.tv_sec = (time_t)seconds};
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Trace: one "SYMBOL gpuN" or "SYMBOL -" line per call, each a single write() on an O_APPEND fd,
 * so lines from concurrent threads and processes never interleave.                           */

static pthread_mutex_t g_trace_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_trace_fd = -1;
static atomic_bool g_trace_ready;
static char *g_trace_path; /* guarded by g_trace_mu */

/* (Re)reads FAKE_NVML_TRACE: on first use and at every nvmlInit*, so a test can change it. */
static void trace_open(void)
{
    pthread_mutex_lock(&g_trace_mu);
    const char *path = getenv("FAKE_NVML_TRACE");
    if (path != NULL && path[0] == '\0')
        path = NULL;
    bool same = path == NULL ? g_trace_path == NULL : g_trace_path != NULL && strcmp(path, g_trace_path) == 0;
    if (!same) {
        int fd = -1;
        if (path != NULL) {
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0)
                fake_warn("cannot open trace file %s: %s", path, strerror(errno));
        }
        /* The previous descriptor stays open on purpose: another thread may be writing to it. */
        atomic_store(&g_trace_fd, fd);
        free(g_trace_path);
        g_trace_path = path != NULL ? strdup(path) : NULL;
    }
    atomic_store(&g_trace_ready, true);
    pthread_mutex_unlock(&g_trace_mu);
}

/* One trace line: the symbol, the GPU (or -), and ``extra`` when not NULL. */
static void trace_line(const char *sym, int gpu, const char *extra)
{
    if (!atomic_load(&g_trace_ready))
        trace_open();
    int fd = atomic_load(&g_trace_fd);
    if (fd < 0)
        return;
    char line[192];
    const char *tail = extra != NULL ? extra : "";
    const char *gap = extra != NULL ? " " : "";
    int n = gpu >= 0 ? snprintf(line, sizeof line, "%s gpu%d%s%s\n", sym, gpu, gap, tail)
                     : snprintf(line, sizeof line, "%s -%s%s\n", sym, gap, tail);
    if (n > 0 && (size_t)n < sizeof line) {
        if (write(fd, line, (size_t)n) < 0) {
            /* Tracing is best effort; a failed write must not change the NVML result. */
        }
    }
}

void fake_trace(const char *sym, int gpu)
{
    trace_line(sym, gpu, NULL);
}

void fake_trace_samples(const char *sym, int gpu, unsigned type, unsigned n, unsigned long long last)
{
    char extra[80];
    snprintf(extra, sizeof extra, "type=%u n=%u last=%llu", type, n, last);
    trace_line(sym, gpu, extra);
}

/* ------------------------------------------------------------------------------------------ */
/* Parsing                                                                                    */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int entry_cmp(const void *a, const void *b)
{
    const struct fake_entry *x = a, *y = b;
    int r = strcmp(x->key, y->key);
    if (r != 0)
        return r;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* "<word>.<number>." at the start of text: returns the number (or -1), *rest = what follows. */
static long indexed_prefix(const char *text, const char *word, const char **rest)
{
    size_t w = strlen(word);
    if (strncmp(text, word, w) != 0 || !isdigit((unsigned char)text[w]))
        return -1;
    char *end;
    errno = 0;
    long n = strtol(text + w, &end, 10);
    if (errno != 0 || *end != '.')
        return -1;
    *rest = end + 1;
    return n;
}

/* Records which GPUs, MIG devices, processes and links a key mentions. */
static void note_key(struct fake_scenario *s, const char *key)
{
    const char *rest;
    long gpu = indexed_prefix(key, "gpu", &rest);
    if (gpu < 0)
        return;
    if (gpu >= FAKE_MAX_GPUS) {
        fake_warn_once(key, "...", "GPU index too large for the fake (max 63); key ignored");
        return;
    }
    struct fake_gpu *g = &s->gpu[gpu];
    g->has_keys = true;
    const char *field;
    long k;
    if ((k = indexed_prefix(rest, "mig.", &field)) >= 0 && k < FAKE_MAX_MIG)
        g->mig_mask |= 1u << k;
    else if ((k = indexed_prefix(rest, "process.", &field)) >= 0 && k < FAKE_MAX_PROCS && strcmp(field, "pid") == 0)
        g->proc_mask |= 1ull << k;
    else if ((k = indexed_prefix(rest, "nvlink.", &field)) >= 0 && k < FAKE_MAX_LINKS)
        g->link_mask |= 1ull << k;
}

/* Parses text (taking ownership; entries point into it). Never fails except for memory. */
static struct fake_scenario *scenario_parse(const char *path, char *text, const struct fake_stamp *stamp)
{
    struct fake_scenario *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->path = path != NULL ? strdup(path) : NULL;
    s->stamp = *stamp;
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == '\n';
    s->entries = calloc(cap, sizeof *s->entries);
    if (s->entries == NULL)
        return NULL;

    unsigned lineno = 0;
    for (char *p = text; p != NULL;) {
        char *line = p;
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        p = nl != NULL ? nl + 1 : NULL;
        lineno++;
        /* '#' starts a comment at the start of a line or after a blank, so "a#b" keeps its '#'. */
        for (char *q = line; *q; q++) {
            if (*q == '#' && (q == line || isspace((unsigned char)q[-1]))) {
                *q = '\0';
                break;
            }
        }
        char *eq = strchr(line, '=');
        if (eq == NULL) {
            if (*trim(line) != '\0')
                fake_warn("%s:%u: no '=' in \"%s\"; line ignored", path ? path : "?", lineno, trim(line));
            continue;
        }
        *eq = '\0';
        char *key = trim(line), *val = trim(eq + 1);
        if (*key == '\0')
            continue;
        s->entries[s->n_entries++] = (struct fake_entry){.key = key, .val = val, .line = lineno};
    }

    /* Sort by key then line; for a repeated key the last line wins. */
    qsort(s->entries, s->n_entries, sizeof *s->entries, entry_cmp);
    size_t out = 0;
    for (size_t i = 0; i < s->n_entries; i++) {
        if (i + 1 < s->n_entries && strcmp(s->entries[i].key, s->entries[i + 1].key) == 0)
            continue;
        s->entries[out++] = s->entries[i];
    }
    s->n_entries = out;

    for (size_t i = 0; i < s->n_entries; i++)
        note_key(s, s->entries[i].key);
    for (int g = 0; g < FAKE_MAX_GPUS; g++)
        s->distinct_gpus += s->gpu[g].has_keys;
    return s;
}

static void stamp_from_stat(const struct stat *sb, struct fake_stamp *st)
{
    st->exists = true;
    st->dev = (unsigned long long)sb->st_dev;
    st->ino = (unsigned long long)sb->st_ino;
    st->size = (long long)sb->st_size;
    st->mtime_sec = (long long)sb->st_mtim.tv_sec;
    st->mtime_nsec = (long long)sb->st_mtim.tv_nsec;
}

static void stamp_of_path(const char *path, struct fake_stamp *st)
{
    struct stat sb;
    memset(st, 0, sizeof *st);
    if (stat(path, &sb) == 0)
        stamp_from_stat(&sb, st);
}

static bool stamp_eq(const struct fake_stamp *a, const struct fake_stamp *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec;
}

/* Reads and parses path; NULL with *err set when it cannot be read. */
static struct fake_scenario *scenario_load(const char *path, int *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    /* Stamp before reading: if the file changes during the read, the next call sees a new stamp. */
    struct stat sb;
    struct fake_stamp st;
    if (fstat(fd, &sb) != 0) {
        *err = errno;
        close(fd);
        return NULL;
    }
    stamp_from_stat(&sb, &st);
    size_t cap = (size_t)sb.st_size + 1024, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            *err = ENOMEM;
            close(fd);
            return NULL;
        }
        if (len + 1 >= cap) {
            cap *= 2;
            char *grown = realloc(buf, cap);
            if (grown == NULL)
                free(buf);
            buf = grown;
            continue;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *err = errno;
            free(buf);
            close(fd);
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    struct fake_scenario *s = scenario_parse(path, buf, &st);
    if (s == NULL)
        *err = ENOMEM;
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* The published scenario, init and shutdown                                                  */

static struct fake_scenario g_empty;                 /* before the first nvmlInit* */
static _Atomic(struct fake_scenario *) g_scn;        /* old ones are leaked, never freed */
static pthread_mutex_t g_reload_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_refcount;
static atomic_llong g_t0_ns;                         /* 0 until the first successful init */

const struct fake_scenario *fake_scenario_now(void)
{
    struct fake_scenario *s = atomic_load(&g_scn);
    if (s == NULL)
        return &g_empty;
    if (s->path == NULL)
        return s;
    struct fake_stamp st;
    stamp_of_path(s->path, &st);
    if (stamp_eq(&st, &s->stamp))
        return s;

    pthread_mutex_lock(&g_reload_mu);
    s = atomic_load(&g_scn);
    stamp_of_path(s->path, &st);
    if (!stamp_eq(&st, &s->stamp)) {
        int err = 0;
        struct fake_scenario *fresh = scenario_load(s->path, &err);
        if (fresh == NULL) {
            fake_warn("cannot re-read scenario %s (%s); keeping the previous one", s->path, strerror(err));
            /* Same contents under the new stamp, so the next call does not retry until it changes. */
            fresh = malloc(sizeof *fresh);
            if (fresh != NULL) {
                *fresh = *s;
                fresh->stamp = st;
            }
        }
        if (fresh != NULL) {
            atomic_store(&g_scn, fresh);
            s = fresh;
        }
    }
    pthread_mutex_unlock(&g_reload_mu);
    return s;
}

/* True when one inotify event in buf[0..len) names `base` (the scenario file) in the watched folder. */
static bool names_file(const char *buf, ssize_t len, const char *base)
{
    for (ssize_t at = 0; at + (ssize_t)sizeof(struct inotify_event) <= len;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + at);
        if (ev->len > 0 && strcmp(ev->name, base) == 0)
            return true;
        if (ev->mask & IN_Q_OVERFLOW)
            return true;
        at += (ssize_t)sizeof(struct inotify_event) + ev->len;
    }
    return false;
}

bool fake_sleep_unless_changed(const struct fake_scenario *seen, double seconds)
{
    if (!(seconds > 0))
        return true;
    char dir[PATH_MAX];
    const char *path = seen->path;
    const char *slash = path != NULL ? strrchr(path, '/') : NULL;
    int fd = path != NULL ? inotify_init1(IN_CLOEXEC | IN_NONBLOCK) : -1;
    if (fd < 0)
        return false;
    size_t dir_len = slash == NULL ? 1 : (slash == path ? 1 : (size_t)(slash - path));
    if (dir_len >= sizeof dir) {
        close(fd);
        return false;
    }
    if (slash == NULL)
        memcpy(dir, ".", 2);
    else {
        memcpy(dir, slash == path ? "/" : path, dir_len);
        dir[dir_len] = '\0';
    }
    const char *base = slash == NULL ? path : slash + 1;
    if (inotify_add_watch(fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB) < 0) {
        close(fd);
        return false;
    }
    /* A rewrite between the caller's look and the watch: seen at once, not a sleep later. */
    double deadline = fake_now_mono() + seconds;
    while (fake_scenario_now() == seen) {
        double left = deadline - fake_now_mono();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, (int)(left * 1000.0) + 1);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready > 0) {
            /* Drain; stop waiting when an event names the scenario file (others: another file there). */
            char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
            bool changed = false;
            for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
                changed = changed || names_file(buf, n, base);
            if (changed)
                break;
        }
    }
    close(fd);
    return true;
}

bool fake_initialized(void)
{
    return atomic_load(&g_refcount) > 0;
}

double fake_elapsed(void)
{
    long long t0 = atomic_load(&g_t0_ns);
    return t0 == 0 ? 0.0 : (double)(mono_ns() - t0) / 1e9;
}

nvmlReturn_t fake_init(void)
{
    trace_open();
    pthread_mutex_lock(&g_init_mu);
    const char *path = getenv("FAKE_NVML_SCENARIO");
    if (path != NULL && path[0] == '\0')
        path = NULL;
    struct fake_scenario *s;
    if (path != NULL) {
        int err = 0;
        s = scenario_load(path, &err);
        if (s == NULL) {
            fake_warn("cannot read scenario %s: %s", path, strerror(err));
            pthread_mutex_unlock(&g_init_mu);
            return NVML_ERROR_UNKNOWN;
        }
    } else {
        fake_warn_once("FAKE_NVML_SCENARIO", "(unset)", "no scenario file, so no GPUs");
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            pthread_mutex_unlock(&g_init_mu);
            return NVML_ERROR_MEMORY;
        }
    }
    pthread_mutex_lock(&g_reload_mu);
    atomic_store(&g_scn, s);
    pthread_mutex_unlock(&g_reload_mu);

    const char *forced = fake_get(s, "init.error");
    if (forced != NULL) {
        nvmlReturn_t r = fake_value_error("init.error", forced, fake_elapsed());
        if (r != NVML_SUCCESS) {
            pthread_mutex_unlock(&g_init_mu);
            return r;
        }
    }
    /* The time base starts once per process, so re-init neither restarts cycles nor re-sends Xids. */
    long long unset = 0;
    atomic_compare_exchange_strong(&g_t0_ns, &unset, mono_ns());
    atomic_fetch_add(&g_refcount, 1);
    pthread_mutex_unlock(&g_init_mu);
    return NVML_SUCCESS;
}

nvmlReturn_t fake_shutdown(void)
{
    pthread_mutex_lock(&g_init_mu);
    nvmlReturn_t r = NVML_SUCCESS;
    if (atomic_load(&g_refcount) == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else
        atomic_fetch_sub(&g_refcount, 1);
    pthread_mutex_unlock(&g_init_mu);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                     */

static int entry_key_cmp(const void *key, const void *entry)
{
    return strcmp(key, ((const struct fake_entry *)entry)->key);
}

const char *fake_get(const struct fake_scenario *s, const char *key)
{
    if (s->n_entries == 0)
        return NULL;
    const struct fake_entry *e = bsearch(key, s->entries, s->n_entries, sizeof *s->entries, entry_key_cmp);
    return e != NULL ? e->val : NULL;
}

static bool parse_f64(const char *s, double *out)
{
    char *end;
    errno = 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        unsigned long long v = strtoull(s, &end, 16);
        if (errno != 0 || end == s || *end != '\0')
            return false;
        *out = (double)v;
        return true;
    }
    double d = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(d))
        return false;
    *out = d;
    return true;
}

/* Decimal or 0x hex; a decimal fraction (61.5) is truncated. */
static bool parse_u64(const char *s, unsigned long long *out)
{
    if (s[0] == '-' || s[0] == '\0')
        return false;
    char *end;
    errno = 0;
    bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    if (errno == 0 && end != s && *end == '\0') {
        *out = v;
        return true;
    }
    double d;
    if (!hex && parse_f64(s, &d) && d >= 0 && d < 18446744073709551616.0) {
        *out = (unsigned long long)d;
        return true;
    }
    return false;
}

/* The period P of a cycling list "a,b,c@P" in seconds; 0 for a value that does not cycle. The one
 * reading of the "@P" suffix: values (cycle_pick), the GPM and sample-buffer integrals and the
 * energy counter step through a cycle alike. */
double fake_cycle_period(const char *val)
{
    const char *at = strrchr(val, '@');
    if (at == NULL)
        return 0;
    char period_text[64];
    snprintf(period_text, sizeof period_text, "%s", at + 1);
    double period;
    return parse_f64(trim(period_text), &period) && period > 0 ? period : 0;
}

/* The end of the cycle step holding µs time from (a cycle's value holds within a step), or t1 when
 * the step outlasts it or the value does not cycle (period 0): the integrals walk a cycle by it. */
unsigned long long fake_cycle_step_end(double period, unsigned long long from, unsigned long long t1)
{
    if (period <= 0)
        return t1;
    unsigned long long step = (unsigned long long)((double)from / 1e6 / period) + 1;
    unsigned long long boundary = (unsigned long long)((double)step * period * 1e6 + 0.5);
    return boundary > from && boundary < t1 ? boundary : t1;
}

/* Copies into out the element of a cycling list "a,b,c@P" active at time t, i.e. element
 * floor(t/P) mod n; a value without a trailing "@<number>" is copied whole. */
static void cycle_pick(const char *val, double t, char *out, size_t size)
{
    const char *start = val, *end = val + strlen(val);
    const char *at = strrchr(val, '@');
    double period = fake_cycle_period(val);
    if (period > 0) {
        size_t n = 1;
        for (const char *p = val; p < at; p++)
            n += *p == ',';
        size_t idx = (size_t)((unsigned long long)(t / period) % n);
        for (size_t i = 0; i < idx; i++)
            start = strchr(start, ',') + 1;
        end = memchr(start, ',', (size_t)(at - start));
        if (end == NULL)
            end = at;
    }
    size_t len = (size_t)(end - start);
    if (len >= size)
        len = size - 1;
    char tmp[256];
    if (len >= sizeof tmp)
        len = sizeof tmp - 1;
    memcpy(tmp, start, len);
    tmp[len] = '\0';
    snprintf(out, size, "%s", trim(tmp));
}

bool fake_value_u64(const char *key, const char *val, double t, unsigned long long *out)
{
    if (val == NULL)
        return false;
    char buf[128];
    cycle_pick(val, t, buf, sizeof buf);
    if (parse_u64(buf, out))
        return true;
    fake_warn_once(key, val, "not a non-negative number; treated as absent");
    return false;
}

bool fake_value_f64(const char *key, const char *val, double t, double *out)
{
    if (val == NULL)
        return false;
    char buf[128];
    cycle_pick(val, t, buf, sizeof buf);
    if (parse_f64(buf, out))
        return true;
    fake_warn_once(key, val, "not a number; treated as absent");
    return false;
}

/* Names are the NVML_ERROR_<NAME> suffixes of nvml.h; texts follow the header's descriptions. */
static const struct {
    const char *name;
    nvmlReturn_t code;
    const char *text;
} k_errors[] = {
    {"SUCCESS", NVML_SUCCESS, "Success"},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND, "Not Found"},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {"TIMEOUT", NVML_ERROR_TIMEOUT, "Timeout"},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM, "The operating system has blocked the request."},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch."},
    {"IN_USE", NVML_ERROR_IN_USE, "In use by another client"},
    {"MEMORY", NVML_ERROR_MEMORY, "Insufficient Memory"},
    {"NO_DATA", NVML_ERROR_NO_DATA, "No data"},
    {"VGPU_ECC_NOT_SUPPORTED", NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "vGPU operation not available with ECC enabled"},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES, "Ran out of critical resources, other than memory"},
    {"FREQ_NOT_SUPPORTED", NVML_ERROR_FREQ_NOT_SUPPORTED, "Frequency not supported"},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument version mismatch"},
    {"DEPRECATED", NVML_ERROR_DEPRECATED, "Deprecated"},
    {"NOT_READY", NVML_ERROR_NOT_READY, "Not ready"},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND, "GPU not found"},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE, "Invalid state"},
    {"RESET_TYPE_NOT_SUPPORTED", NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "Reset type not supported"},
    {"UNKNOWN", NVML_ERROR_UNKNOWN, "Unknown Error"},
};

nvmlReturn_t fake_value_error(const char *key, const char *val, double t)
{
    char buf[128];
    cycle_pick(val, t, buf, sizeof buf);
    const char *name = buf;
    if (strncasecmp(name, "NVML_ERROR_", 11) == 0)
        name += 11;
    else if (strncasecmp(name, "NVML_", 5) == 0)
        name += 5;
    if (isdigit((unsigned char)name[0])) {
        char *end;
        unsigned long code = strtoul(name, &end, 10);
        if (*end == '\0')
            return (nvmlReturn_t)code;
    }
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (strcasecmp(name, k_errors[i].name) == 0)
            return k_errors[i].code;
    fake_warn_once(key, val, "unknown NVML error name; using UNKNOWN");
    return NVML_ERROR_UNKNOWN;
}

const char *fake_error_text(nvmlReturn_t r)
{
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == r)
            return k_errors[i].text;
    return "Unknown Error";
}

/* ------------------------------------------------------------------------------------------ */
/* Devices and handles                                                                        */

unsigned fake_device_count(const struct fake_scenario *s, double t)
{
    unsigned long long n;
    const char *v = fake_get(s, "device_count");
    if (v != NULL && fake_value_u64("device_count", v, t, &n))
        return n > FAKE_MAX_GPUS ? FAKE_MAX_GPUS : (unsigned)n;
    return s->distinct_gpus;
}

/* With an explicit device_count every index below it exists; otherwise gpuN exists while the
 * file has gpuN.* keys, so deleting them (or lowering device_count) makes the GPU vanish. */
bool fake_device_present(const struct fake_scenario *s, unsigned gpu, double t)
{
    if (gpu >= FAKE_MAX_GPUS || gpu >= fake_device_count(s, t))
        return false;
    return fake_get(s, "device_count") != NULL || s->gpu[gpu].has_keys;
}

static struct nvmlDevice_st g_gpu_handles[FAKE_MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[FAKE_MAX_GPUS][FAKE_MAX_MIG];

nvmlDevice_t fake_handle(int gpu, int mig)
{
    return mig < 0 ? &g_gpu_handles[gpu] : &g_mig_handles[gpu][mig];
}

/* Compared as integers: a foreign pointer is not ours, and comparing unrelated pointers is UB. */
void fake_decode_handle(nvmlDevice_t dev, int *gpu, int *mig)
{
    uintptr_t p = (uintptr_t)dev, g = (uintptr_t)g_gpu_handles, m = (uintptr_t)g_mig_handles;
    const size_t size = sizeof(struct nvmlDevice_st);
    *gpu = -1;
    *mig = -1;
    if (p >= g && p < g + sizeof g_gpu_handles && (p - g) % size == 0) {
        *gpu = (int)((p - g) / size);
    } else if (p >= m && p < m + sizeof g_mig_handles && (p - m) % size == 0) {
        size_t i = (p - m) / size;
        *gpu = (int)(i / FAKE_MAX_MIG);
        *mig = (int)(i % FAKE_MAX_MIG);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Prologue                                                                                   */

/* <scope><kind>.<symbol>, else <scope><kind>.<symbol without a trailing _vN>, where scope is
 * "gpuN." for a device-level call and "" for a host-level one. So a key naming
 * nvmlDeviceGetPciInfo also covers nvmlDeviceGetPciInfo_v3, while one naming _v3 covers only it. */
static const char *fault_value(const struct fake_call *c, const char *kind, const char *sym, char *key, size_t size)
{
    if (c->gpu >= 0)
        snprintf(key, size, "gpu%d.%s.%s", c->gpu, kind, sym);
    else
        snprintf(key, size, "%s.%s", kind, sym);
    const char *v = fake_get(c->s, key);
    if (v != NULL)
        return v;
    size_t len = strlen(key), i = len;
    while (i > 0 && isdigit((unsigned char)key[i - 1]))
        i--;
    if (i < len && i >= 2 && key[i - 1] == 'v' && key[i - 2] == '_') {
        key[i - 2] = '\0';
        return fake_get(c->s, key);
    }
    return NULL;
}

/* The delay.F fault: sleeps holding no lock, so other calls carry on, then catches up with the
 * scenario and the clock. */
static void apply_delay(struct fake_call *c, const char *sym)
{
    char key[256];
    double d;
    const char *v = fault_value(c, "delay", sym, key, sizeof key);
    if (v != NULL && fake_value_f64(key, v, c->t, &d) && d > 0) {
        fake_sleep(d);
        c->s = fake_scenario_now();
        c->t = fake_elapsed();
    }
}

/* The error.F fault: the forced return code, or SUCCESS. */
static nvmlReturn_t forced_error(const struct fake_call *c, const char *sym)
{
    char key[256];
    const char *v = fault_value(c, "error", sym, key, sizeof key);
    return v != NULL ? fake_value_error(key, v, c->t) : NVML_SUCCESS;
}

nvmlReturn_t fake_prologue(struct fake_call *c, const char *sym, int gpu, int mig, unsigned flags)
{
    if (!(flags & FAKE_NO_TRACE))
        fake_trace(sym, gpu);
    c->s = &g_empty;
    c->t = 0;
    c->gpu = gpu;
    c->mig = mig;
    if (!fake_initialized())
        return NVML_ERROR_UNINITIALIZED;
    c->s = fake_scenario_now();
    c->t = fake_elapsed();
    if (gpu < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((flags & FAKE_BY_INDEX) && (unsigned)gpu >= fake_device_count(c->s, c->t))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!fake_device_present(c->s, (unsigned)gpu, c->t))
        return NVML_ERROR_GPU_IS_LOST;
    if (mig >= 0 && !(c->s->gpu[gpu].mig_mask & (1u << mig)))
        return NVML_ERROR_INVALID_ARGUMENT; /* that MIG device is gone from the scenario */

    apply_delay(c, sym);
    double lost;
    if (!fake_device_present(c->s, (unsigned)gpu, c->t) || (fake_dev_f64(c, &lost, "lost_after") && c->t >= lost))
        return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t r = forced_error(c, sym);
    if (r != NVML_SUCCESS)
        return r;
    if (mig >= 0 && !(flags & FAKE_MIG_OK))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* A field-value entry that stands for the device call ``sym``: that call's delay.F, lost_after and
 * error.F keys apply to the entry (no trace line: the entry is not a call of its own). */
nvmlReturn_t fake_entry_fault(struct fake_call *c, const char *sym)
{
    apply_delay(c, sym);
    double lost;
    if (!fake_device_present(c->s, (unsigned)c->gpu, c->t) || (fake_dev_f64(c, &lost, "lost_after") && c->t >= lost))
        return NVML_ERROR_GPU_IS_LOST;
    return forced_error(c, sym);
}

/* Host-level calls honour delay.F and error.F keys without a gpuN. prefix. */
nvmlReturn_t fake_system_prologue(const char *sym, const struct fake_scenario **s, double *t)
{
    fake_trace(sym, -1);
    *s = &g_empty;
    *t = 0;
    if (!fake_initialized())
        return NVML_ERROR_UNINITIALIZED;
    struct fake_call c = {.s = fake_scenario_now(), .t = fake_elapsed(), .gpu = -1, .mig = -1};
    apply_delay(&c, sym);
    *s = c.s;
    *t = c.t;
    return forced_error(&c, sym);
}

/* ------------------------------------------------------------------------------------------ */
/* Per-device look-ups                                                                        */

static const char *dev_vlookup(const struct fake_call *c, char *key, size_t size, const char *fmt, va_list ap)
{
    int n = snprintf(key, size, "gpu%d.", c->gpu);
    vsnprintf(key + n, size - (size_t)n, fmt, ap);
    return fake_get(c->s, key);
}

const char *fake_dev_str(const struct fake_call *c, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    const char *v = dev_vlookup(c, key, sizeof key, fmt, ap);
    va_end(ap);
    return v;
}

bool fake_dev_u64(const struct fake_call *c, unsigned long long *out, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    const char *v = dev_vlookup(c, key, sizeof key, fmt, ap);
    va_end(ap);
    return v != NULL && fake_value_u64(key, v, c->t, out);
}

bool fake_dev_f64(const struct fake_call *c, double *out, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    const char *v = dev_vlookup(c, key, sizeof key, fmt, ap);
    va_end(ap);
    return v != NULL && fake_value_f64(key, v, c->t, out);
}

const char *fake_gpu_str(const struct fake_scenario *s, int gpu, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof key, "gpu%d.%s", gpu, suffix);
    return fake_get(s, key);
}

bool fake_gpu_u64(const struct fake_scenario *s, int gpu, double t, const char *suffix, unsigned long long *out)
{
    char key[256];
    snprintf(key, sizeof key, "gpu%d.%s", gpu, suffix);
    const char *v = fake_get(s, key);
    return v != NULL && fake_value_u64(key, v, t, out);
}

bool fake_gpu_f64(const struct fake_scenario *s, int gpu, double t, const char *suffix, double *out)
{
    char key[256];
    snprintf(key, sizeof key, "gpu%d.%s", gpu, suffix);
    const char *v = fake_get(s, key);
    return v != NULL && fake_value_f64(key, v, t, out);
}

nvmlReturn_t fake_uint(const struct fake_call *c, unsigned int *out, const char *key)
{
    unsigned long long v;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!fake_dev_u64(c, &v, "%s", key))
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)v;
    return NVML_SUCCESS;
}

nvmlReturn_t fake_ull(const struct fake_call *c, unsigned long long *out, const char *key)
{
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fake_dev_u64(c, out, "%s", key) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t fake_copy_str(char *buf, unsigned int length, const char *value)
{
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(value);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, n + 1);
    return NVML_SUCCESS;
}

void fake_uuid(const struct fake_scenario *s, int gpu, int mig, char *buf, size_t size)
{
    char suffix[32];
    if (mig < 0)
        snprintf(suffix, sizeof suffix, "uuid");
    else
        snprintf(suffix, sizeof suffix, "mig.%d.uuid", mig);
    const char *v = fake_gpu_str(s, gpu, suffix);
    if (v != NULL)
        snprintf(buf, size, "%s", v);
    else if (mig < 0)
        snprintf(buf, size, "GPU-00000000-0000-0000-0000-%012d", gpu);
    else
        snprintf(buf, size, "MIG-00000000-0000-0000-%04d-%012d", gpu, mig);
}

void fake_pci_bus_id(const struct fake_scenario *s, int gpu, char *buf, size_t size)
{
    const char *v = fake_gpu_str(s, gpu, "pci_bus_id");
    if (v != NULL)
        snprintf(buf, size, "%s", v);
    else
        snprintf(buf, size, "00000000:%02X:00.0", (unsigned)gpu);
}

/* "DDDDDDDD:BB:DD.F", "DDDD:BB:DD.F" or "BB:DD.F" (hex). */
bool fake_parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *device, unsigned *function)
{
    int used = 0;
    if (sscanf(text, "%x:%x:%x.%x%n", domain, bus, device, function, &used) == 4 && text[used] == '\0')
        return true;
    *domain = 0;
    used = 0;
    return sscanf(text, "%x:%x.%x%n", bus, device, function, &used) == 3 && text[used] == '\0';
}
