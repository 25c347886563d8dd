/*
 * metrics.c - the step loop's JSON-lines metrics file: one object per
 * step, flushed, every write checked.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "train.h"

struct merak_metrics {
    FILE *f;
    char *path;
    const char *dtype;   /* every line says it: "fp32", "tf32" or "bf16" */
};

merak_metrics *merak_metrics_open(const char *path, const char *dtype, char *err, size_t errlen)
{
    merak_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        merak_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (!(m->f = fopen(path, "a"))) {
        merak_errf(err, errlen, "%s: %s", path, strerror(errno));
        free(m->path);
        free(m);
        return NULL;
    }
    m->dtype = dtype;
    return m;
}

/* x as JSON: %.9g, or null for NaN and Inf (a skipped step's), which JSON
 * cannot hold. */
static const char *finite_or_null(double x, char *buf)
{
    if (!isfinite(x))
        return "null";
    snprintf(buf, 32, "%.9g", x);
    return buf;
}

int merak_metrics_write(merak_metrics *m, const merak_step_info *i, char *err, size_t errlen)
{
    char lossbuf[32], normbuf[32], valbuf[32];
    /* Flushed every step: a crash loses nothing already reported. */
    if (fprintf(m->f,
                "{\"step\": %d, \"loss\": %s, \"grad_norm\": %s, \"lr\": %.9g, "
                "\"tokens_per_s\": %.6g, \"step_ms\": %.6g, \"dp_wait_ms\": %.6g, \"dp_overlap\": %.4g, "
                "\"bytes\": {\"tp\": %.0f, \"pp\": %.0f, \"dp\": %.0f, \"tied\": %.0f}, \"dtype\": \"%s\"%s%s%s}\n",
                i->step, finite_or_null(i->loss, lossbuf), finite_or_null(i->grad_norm, normbuf), i->lr,
                i->tokens_per_s, i->step_ms, i->dp_wait_ms, i->dp_overlap, i->tp_bytes, i->pp_bytes, i->dp_bytes,
                i->tied_bytes, m->dtype, i->skipped ? ", \"skipped\": true" : "", i->evaluated ? ", \"val_loss\": " : "",
                i->evaluated ? finite_or_null(i->val_loss, valbuf) : "") < 0 ||
        fflush(m->f) != 0)
        return merak_errf(err, errlen, "%s: %s", m->path, strerror(errno));
    return 0;
}

int merak_metrics_close(merak_metrics *m, char *err, size_t errlen)
{
    if (!m)
        return 0;
    int rc = fclose(m->f) == 0 ? 0 : merak_errf(err, errlen, "%s: %s", m->path, strerror(errno));
    free(m->path);
    free(m);
    return rc;
}
