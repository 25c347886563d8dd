/* tap.h - a few lines of TAP (Test Anything Protocol) for the unit tests. */
#ifndef MERAK_TAP_H
#define MERAK_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n, tap_failed;

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

/* Prints the plan (at the end) and returns the exit status. */
static int tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif
