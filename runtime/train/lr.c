/* lr.c - learning-rate schedules: linear warmup, then constant or cosine. */
#include <math.h>

#include "names.h"
#include "train.h"

/* The names, in one table (indexed by merak_lr_kind). */
static const char *const lr_names[] = {[MERAK_LR_CONSTANT] = "constant", [MERAK_LR_COSINE] = "cosine"};
enum { NLR = sizeof lr_names / sizeof lr_names[0] };

int merak_lr_parse(const char *name, merak_lr_kind *kind)
{
    int i = merak_name_find(lr_names, NLR, name);
    if (i >= 0)
        *kind = (merak_lr_kind)i;
    return i < 0 ? -1 : 0;
}

const char *merak_lr_names(void)
{
    static char names[64];
    return merak_names_join(lr_names, NLR, names, sizeof names);
}

float merak_lr_at(const merak_lr *s, int step)
{
    if (step < s->warmup)
        return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == MERAK_LR_CONSTANT)
        return s->lr;
    int span = s->steps - s->warmup;
    double progress = (double)(step - s->warmup) / (span > 1 ? span : 1);
    if (progress > 1)
        progress = 1;
    return (float)(s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress)));
}
