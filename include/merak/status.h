/*
 * status.h - the status every layer of Merak returns: 0, or one of the
 * negative codes below with one line in the caller's error buffer.
 * Functions that return a count return it (>= 0) or one of these.  The
 * first error is the one kept: a layer passes on the status and the line
 * of the call that failed first, never a later one's.
 */
#ifndef MERAK_STATUS_H
#define MERAK_STATUS_H

typedef enum merak_status {
    MERAK_OK = 0,
    /* Failed.  From a collective call: on every rank alike, after they
     * agreed (rank 0 holds the line, the others an empty one). */
    MERAK_FAILED = -1,
    /* This rank failed alone inside a collective phase: the others may be
     * waiting on it, so the caller reports the line and ends the job
     * (merak_abort). */
    MERAK_FAILED_HERE = -2,
    /* The arguments cannot work (a name no table has, a layout the model
     * or the machine cannot take, a build without the asked backend): a
     * usage error, which the tools exit with status 2 for. */
    MERAK_USAGE = -3,
} merak_status;

#endif /* MERAK_STATUS_H */
