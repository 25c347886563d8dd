/*
 * schedule_kind.h - the pipeline schedules (see schedule.h for what each
 * one does, policy.h for their names).
 */
#ifndef MERAK_SCHEDULE_KIND_H
#define MERAK_SCHEDULE_KIND_H

typedef enum merak_schedule_kind {
    MERAK_SCHEDULE_GPIPE,
    MERAK_SCHEDULE_1F1B,
    MERAK_SCHEDULE_SCP,
    MERAK_SCHEDULE_ZB_H1,
    MERAK_SCHEDULE_INTERLEAVED,
    MERAK_SCHEDULE_COUNT_
} merak_schedule_kind;

/* The most model chunks (virtual stages) per pipeline stage interleaved
 * takes. */
#define MERAK_MAX_CHUNKS 64

#endif /* MERAK_SCHEDULE_KIND_H */
