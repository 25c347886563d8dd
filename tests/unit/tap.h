/* tap.h - a few lines of TAP (Test Anything Protocol) for the unit tests. */
#ifndef MERAK_TAP_H
#define MERAK_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n, tap_failed, tap_planned = -1;

/* A comment line ("# ..."): seeds, totals. */
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    fputs("# ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* The plan up front, for a test that knows its count (tap_done then checks
 * that this many ran instead of printing it). */
static inline void tap_plan(int n)
{
    printf("1..%d\n", n);
    tap_planned = n;
}

/* Records one test; returns cond so callers can add diagnostics. */
static int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    printf("%s %d - ", cond ? "ok" : "not ok", ++tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond)
        tap_failed++;
    fflush(stdout);
    return cond;
}

/* Prints the plan (at the end, unless tap_plan did) and returns the exit
 * status: 1 if a test failed or not as many ran as planned. */
static int tap_done(void)
{
    if (tap_planned < 0)
        printf("1..%d\n", tap_n);
    else if (tap_n != tap_planned) {
        tap_diag("ran %d tests, planned %d", tap_n, tap_planned);
        return 1;
    }
    if (tap_failed)
        tap_diag("%d of %d tests failed", tap_failed, tap_n);
    return tap_failed ? 1 : 0;
}

#endif
