/*
 * stage_gather.c - the whole model's parameters brought to rank 0 from
 * every stage's dp rank 0 (merak_stage_gather: saving weights, sampling,
 * exporting), each tensor-parallel shard put in its place.
 */
#include <stdlib.h>
#include <string.h>

#include "stage_impl.h"

/* The parameters pp rank p's chunks read in g (a shard of the model
 * whose virtual stage bounds are `bounds`), in first-use order: the order
 * merak_exec_create gives them.  Returns the count. */
static int stage_params(const merak_graph *g, const int *bounds, int p, int pp, int V, int *roots)
{
    int n = 0;
    for (int c = 0; c < V; c++) {
        int end = merak_cut_map(g, bounds[c * pp + p + 1]);
        for (int i = merak_cut_map(g, bounds[c * pp + p]); i < end; i++)
            for (int j = 0; j < g->ops[i].nin; j++) {
                int t = g->ops[i].in[j], seen = 0;
                if (t < 0 || g->tensors[t].kind != MERAK_T_PARAM)
                    continue;
                t = merak_graph_param_root(g, t);
                for (int q = 0; q < n; q++)
                    seen |= roots[q] == t;
                if (!seen)
                    roots[n++] = t;
            }
    }
    return n;
}

void merak_gathered_free(merak_gathered *w)
{
    for (int i = 0; w->data && i < w->n; i++)
        free(w->data[i]);
    free(w->data);
    free(w->tensors);
    memset(w, 0, sizeof *w);
}

/* Sends this rank's parameters to world rank 0 (host copies). */
static int send_params(merak_stage *s, char *err, size_t errlen)
{
    size_t most = 0;
    for (int i = 0; i < merak_exec_num_params(s->e); i++)
        if (merak_exec_param_elems(s->e, i) > most)
            most = merak_exec_param_elems(s->e, i);
    float *buf = malloc((most ? most : 1) * sizeof *buf);
    int rc = buf ? 0 : merak_errf(err, errlen, "out of memory gathering parameters");
    for (int i = 0; i < merak_exec_num_params(s->e) && rc == 0; i++) {
        if (merak_exec_param_read(s->e, i, buf) < 0)
            rc = merak_errf(err, errlen, "copying parameters from the %s backend failed", s->k->name);
        else if (merak_send(s->world_g, buf, merak_exec_param_elems(s->e, i) * sizeof(float), 0, i,
                            NULL) < 0)
            rc = merak_stage_comm_failed(s, "sending parameters to rank 0", err, errlen);
    }
    free(buf);
    return rc;
}

/* Rank 0 works out each rank's shard and stage from the whole graph and
 * the stage bounds in it, and receives (or copies) every parameter. */
int merak_stage_gather(merak_stage *s, merak_gathered *w, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const merak_graph *model = s->model;
    memset(w, 0, sizeof *w);
    if (gr->dp_rank != 0)
        return 0;
    if (gr->rank != 0)
        return send_params(s, err, errlen);
    int nt = model->ntensors, rc = 0;
    int *roots = calloc((size_t)nt, sizeof *roots);
    float **whole = calloc((size_t)nt, sizeof *whole);   /* by tensor id of model */
    float *buf = NULL;
    w->tensors = calloc((size_t)nt, sizeof *w->tensors);
    if (!roots || !w->tensors || !whole)
        rc = merak_errf(err, errlen, "out of memory gathering parameters");
    for (int p = 0; p < gr->pp && rc == 0; p++)
        for (int r = 0; r < gr->tp && rc == 0; r++) {
            merak_graph *shard = gr->tp > 1 ? merak_graph_shard(model, gr->tp, r, s->rules, s->nrules,
                                                                err, errlen) : NULL;
            const merak_graph *gl = shard ? shard : model;
            if (gr->tp > 1 && !shard) {
                rc = -1;
                break;
            }
            int count = stage_params(gl, s->bounds, p, gr->pp, s->V, roots);
            int src = merak_grid_rank(gr, 0, r, p);
            for (int i = 0; i < count && rc == 0; i++) {
                const merak_tensor *lt = &gl->tensors[roots[i]];
                int gt = merak_graph_find(model, lt->name);
                size_t bytes = (size_t)merak_tensor_elems(lt) * sizeof(float);
                float *b = gt < 0 ? NULL : realloc(buf, bytes);
                if (!b) {
                    rc = gt < 0 ? merak_errf(err, errlen, "parameter %s is not in the model", lt->name)
                                : merak_errf(err, errlen, "out of memory gathering parameters");
                    break;
                }
                buf = b;
                if (src == 0 && merak_exec_param_read(s->e, i, buf) < 0)
                    rc = merak_errf(err, errlen, "copying parameters from the %s backend failed",
                                    s->k->name);
                else if (src != 0 && merak_recv(s->world_g, buf, bytes, src, i, NULL) < 0)
                    rc = merak_stage_comm_failed(s, "receiving parameters", err, errlen);
                if (rc == 0 && !whole[gt]) {  /* a tied parameter arrives twice, with equal values */
                    whole[gt] = malloc((size_t)merak_tensor_elems(&model->tensors[gt]) * sizeof(float));
                    if (!whole[gt])
                        rc = merak_errf(err, errlen, "out of memory gathering parameters");
                    else
                        w->tensors[w->n++] = gt;
                }
                if (rc == 0)
                    merak_shard_place(lt, buf, whole[gt]);
            }
            merak_graph_destroy(shard);
        }
    if (rc == 0 && !(w->data = calloc((size_t)(w->n ? w->n : 1), sizeof *w->data)))
        rc = merak_errf(err, errlen, "out of memory gathering parameters");
    for (int i = 0; rc == 0 && i < w->n; i++) {
        w->data[i] = whole[w->tensors[i]];
        whole[w->tensors[i]] = NULL;
    }
    for (int i = 0; whole && i < nt; i++)
        free(whole[i]);
    free(roots), free(whole), free(buf);
    if (rc < 0)
        merak_gathered_free(w);
    return rc;
}
