/*
 * cli.c - the tools' shared error and number helpers (see cli.h).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *cli_prog = "merak";

void cli_start(const char *prog)
{
    cli_prog = prog;
    signal(SIGXFSZ, SIG_IGN);
}

void cli_stdout_done(void)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the output: %s", strerror(errno ? errno : EIO));
}

/* Under a parallel launcher every rank parses the same flags and finds
 * the same mistake: only the first rank says so (the launcher's rank
 * variables are read, MPI need not have started). */
static int first_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s)
            return strcmp(s, "0") == 0;
    }
    return 1;
}

/* Seconds the other ranks give the first to say it: a launcher ends the
 * job when the first rank exits, and one that has not printed yet then
 * never does (mpirun kills the rest when one rank exits non-zero). */
#define FIRST_RANK_WAIT 10

static _Noreturn void vdie(int status, const char *tail, const char *fmt, va_list ap)
{
    if (first_rank()) {
        fprintf(stderr, "%s: ", cli_prog);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "%s\n", tail);
    } else {
        sleep(FIRST_RANK_WAIT);
    }
    exit(status);
}

void cli_die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(EXIT_USAGE, " (see --help)", fmt, ap);
}

void cli_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdie(EXIT_FAILURE, "", fmt, ap);
}

long cli_parse_int(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end)
        cli_die_usage("%s: '%s' is not an integer", flag, s);
    if (errno == ERANGE)   /* an integer, beyond a long */
        cli_die_usage("%s: %s is out of range [%ld, %ld]", flag, s, lo, hi);
    if (v < lo || v > hi)
        cli_die_usage("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

double cli_parse_double_in(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        cli_die_usage("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi))
        cli_die_usage("%s: %g is out of range %c%g, %g%c", flag, v, lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    return v;
}

double cli_parse_double(const char *flag, const char *s, double lo, double hi)
{
    return cli_parse_double_in(flag, s, lo, 0, hi, 0);
}

float cli_parse_float_in(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open)
{
    char *end;
    errno = 0;
    const double u = strtod(s, &end);
    if (errno == ERANGE && end != s && !*end && fabs(u) < 1)
        cli_die_usage("%s: %s is below the smallest single-precision number, %g", flag, s, (double)FLT_MIN);
    const double v = cli_parse_double_in(flag, s, lo, lo_open, hi, hi_open);
    const float f = (float)v;
    if (v != 0 && fabs(v) < FLT_MIN)
        cli_die_usage("%s: %s is below the smallest single-precision number, %g", flag, s, (double)FLT_MIN);
    if (f < lo || f > hi || (lo_open && f == lo) || (hi_open && f == hi))
        cli_die_usage("%s: %s is %.9g in single precision, out of range %c%g, %g%c", flag, s, (double)f,
                      lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    return f;
}

float cli_parse_float(const char *flag, const char *s, double lo, double hi)
{
    return cli_parse_float_in(flag, s, lo, 0, hi, 0);
}

int64_t cli_parse_size(const char *flag, const char *s)
{
    static const struct { const char *unit; int64_t bytes; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000},
        {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", (int64_t)1 << 40},
    };
    char *end = NULL;
    errno = 0;
    long long v = isdigit((unsigned char)*s) ? strtoll(s, &end, 10) : -1;   /* no sign, no space */
    for (size_t i = 0; v >= 0 && i < sizeof units / sizeof *units; i++)
        if (strcmp(end, units[i].unit) == 0) {
            if (errno == ERANGE || v > ((int64_t)1 << 62) / units[i].bytes)
                cli_die_usage("%s: '%s' is too large (at most 2^62 bytes)", flag, s);
            if (v == 0)
                cli_die_usage("%s: '%s' is not a size above 0", flag, s);
            return v * units[i].bytes;
        }
    cli_die_usage("%s: '%s' is not a size (a whole number of bytes, or with a unit: KB, MB, GB, TB are powers "
                  "of 1000, KiB, MiB, GiB, TiB of 1024)", flag, s);
}

void cli_model(const char *name, merak_model_config *cfg)
{
    char err[512];
    if (merak_model_config_resolve(name, cfg, err, sizeof err) < 0) {
        /* An unknown preset is a bad flag value; a bad file is not. */
        fprintf(stderr, "%s: %s\n", cli_prog, err);
        exit(strchr(name, '/') || strstr(name, ".json") ? EXIT_FAILURE : EXIT_USAGE);
    }
    if (merak_model_config_check(cfg, err, sizeof err) < 0)
        cli_die("%s: %s", name, err);
}

int cli_default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void cli_saved_note(cli_saved *s, const char *file)
{
    if (s->n++ == 0)
        snprintf(s->first, sizeof s->first, "%s", file);
    memcpy(s->shard, s->last, sizeof s->shard);
    snprintf(s->last, sizeof s->last, "%s", file);
}

const char *cli_saved_say(const cli_saved *s, char *buf, size_t len)
{
    if (s->n <= 1)
        snprintf(buf, len, "%s", s->last);
    else
        snprintf(buf, len, "%s, the index of %d shards (%s to %s)", s->last, s->n - 1, s->first, s->shard);
    return buf;
}
