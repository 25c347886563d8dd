/* clock.h - the runtime's one clock: monotonic seconds, for step times,
 * waits and rates. */
#ifndef MERAK_CLOCK_H
#define MERAK_CLOCK_H

#include <time.h>

static inline double merak_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
