/* names.h - lookups in the runtime's tables of names (schedules, partition
 * methods, learning-rate curves, point-to-point backends): each table is
 * spelled once, and parsing and the lists in messages come from it. */
#ifndef MERAK_NAMES_H
#define MERAK_NAMES_H

#include <stddef.h>

/* Index of name among names[0..n), or -1 (also for NULL). */
int merak_name_find(const char *const *names, int n, const char *name);
/* "a, b or c" into buf; returns buf. */
const char *merak_names_join(const char *const *names, int n, char *buf, size_t len);

#endif
