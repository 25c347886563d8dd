/*
 * pipesvg.c - pipeline pictures (see pipesvg.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pipesvg.h"

static const char *colour(int kind)
{
    switch (kind) {
    case MERAK_I_FWD: return "#4c78a8";
    case MERAK_I_BWD: return "#59a14f";
    case MERAK_I_BWD_INPUT: return "#8cd17d";
    case MERAK_I_BWD_WEIGHT: return "#2f6b3a";
    case MERAK_I_RECOMPUTE: return "#f28e2b";
    case MERAK_I_LOAD: return "#b07aa1";
    case MERAK_I_OPTIMIZER_STEP: return "#9c755f";
    case MERAK_I_WAIT_ACT:
    case MERAK_I_WAIT_GRAD:
    case MERAK_I_WAIT_SENDS: return "#e15759";
    case MERAK_I_REDUCE_TIED:
    case MERAK_I_REDUCE_DP: return "#76b7b2";
    case MERAK_TRACE_TP_ALLREDUCE: return "#edc948";
    case MERAK_TRACE_STEP_ALLREDUCE: return "#bab0ac";
    case MERAK_TRACE_DP_BUCKETS: return "#4e79a7";
    default: return "#999999";
    }
}

/* Text from a trace file (row names, the layout) as XML character data. */
static void put_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputs(*s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '&' ? "&amp;" : (char[2]){*s, 0}, f);
}

int pipesvg_write(const merak_trace *p, const char *path, const char *title, int nrows,
                  const char *const *labels, double t0, double span, const char *unit, char *err,
                  size_t errlen)
{
    merak_atomic *a;
    if (p->failed) {
        snprintf(err, errlen, "%s: out of memory: parts of the picture were lost", path);
        return -1;
    }
    if (merak_atomic_open(path, &a, err, errlen) < 0)
        return -1;
    FILE *f = merak_atomic_file(a);
    const double left = labels ? 150 : 70, top = 40, row = 28, strip = 6, width = 1000;
    const double scale = span > 0 ? width / span : 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n",
            left + width + 20, top + row * nrows + 102);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">", left);
    put_text(f, title);
    fputs("</text>\n", f);
    for (int r = 0; r < nrows; r++) {
        double y = top + row * r;
        fprintf(f, "<text x=\"8\" y=\"%.1f\">", y + row / 2 + 4);
        if (labels && labels[r])
            put_text(f, labels[r]);
        else
            fprintf(f, "stage %d", r);
        fputs("</text>\n", f);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#e6e6e6\"/>\n", left,
                y + 2, width, row - 4);
    }
    int seen[MERAK_TRACE_KINDS_] = {0};
    for (size_t i = 0; i < p->n; i++) {
        const merak_trace_event *b = &p->ev[i];
        /* communication a strip at the bottom of the row, reductions in
         * flight a thinner one at its top, over the compute they overlap */
        const merak_track tr = merak_trace_track(b->kind);
        int comm = tr != MERAK_TRACK_COMPUTE;
        double x = left + (b->start - t0) * scale, w = (b->end - b->start) * scale;
        double y = top + row * b->lane + (tr == MERAK_TRACK_COMM ? row - 2 - strip : 2);
        double h = tr == MERAK_TRACK_COMM ? strip : tr == MERAK_TRACK_FLIGHT ? strip / 2 : row - 4 - strip;
        if (b->kind >= 0 && b->kind < MERAK_TRACE_KINDS_)
            seen[b->kind] = 1;
        /* odd model chunks (interleaved) lighter */
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s%s>"
                   "<title>%s mb %d chunk %d [%g, %g]</title></rect>\n",
                x, y, w > 0.05 ? w : 0.05, h, colour(b->kind), comm ? "" : " stroke=\"white\" stroke-width=\"0.5\"",
                b->chunk % 2 ? " fill-opacity=\"0.55\"" : "", merak_trace_kind_name(b->kind), b->mb, b->chunk,
                b->start - t0, b->end - t0);
        if (!comm && w >= 14 && b->mb >= 0)
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\" text-anchor=\"middle\">%d</text>\n",
                    x + w / 2, y + h / 2 + 4, b->mb);
    }
    /* the time axis: five ticks */
    double ya = top + row * nrows + 4;
    for (int i = 0; i <= 4; i++) {
        double x = left + width * i / 4;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.4g%s</text>\n",
                x, ya, x, ya + 4, x, ya + 16, span * i / 4, unit);
    }
    double x = left, y = ya + 30;
    for (int k = 0; k < MERAK_TRACE_KINDS_; k++) {
        if (!seen[k])
            continue;
        if (x > left + width - 120)
            x = left, y += 16;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                x, y, colour(k), x + 16, y + 10, merak_trace_kind_name(k));
        x += 130;
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">grey: idle</text>\n</svg>\n", x, y + 10);
    return merak_atomic_commit(a, err, errlen);
}
