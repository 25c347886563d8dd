/* lr.c - learning-rate schedules: linear warmup, then constant or cosine. */
#include <math.h>

#include "train.h"

float merak_lr_at(const merak_lr_sched *s, int step)
{
    if (step < s->warmup)
        return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == MERAK_SCHEDULE_CONSTANT)
        return s->lr;
    int span = s->steps - s->warmup;
    double progress = (double)(step - s->warmup) / (span > 1 ? span : 1);
    if (progress > 1)
        progress = 1;
    return (float)(s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress)));
}
