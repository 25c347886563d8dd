/*
 * node.c - the node summary: create, copy, free, build by hand (synthetic
 * nodes), restrict to visible GPUs, select NICs, and answer queries.
 * discover.c fills summaries from hwloc; nothing here touches a topology.
 */
#include "topo_internal.h"

#include <ctype.h>  /* isspace, isdigit, isxdigit */
#include <errno.h>  /* EINVAL, ENOMEM */
#include <stdio.h>  /* snprintf, sscanf */
#include <stdlib.h> /* calloc, free, realloc, strtol */
#include <string.h> /* strcmp, strdup, strncmp */

/* Made-up bridge ids for synthetic devices, far above hwloc's gp_index values. */
#define SYNTH_SWITCH_BASE (UINT64_C(1) << 61)
#define SYNTH_ID_BASE (UINT64_C(1) << 62)

/* ------------------------------------------------------------ lifecycle */

merak_topo_node *topo_node_new(const char *source)
{
    merak_topo_node *node = calloc(1, sizeof(*node));
    if (!node)
        return NULL;
    node->source = strdup(source ? source : "");
    if (!node->source) {
        free(node);
        return NULL;
    }
    node->next_id = SYNTH_ID_BASE;
    return node;
}

static void domain_free(topo_domain *d)
{
    hwloc_bitmap_free(d->cpuset);
    hwloc_bitmap_free(d->nodeset);
    for (int c = 0; c < d->ncores; c++)
        hwloc_bitmap_free(d->cores[c]);
    free(d->cores);
    free(d->cpus);
}

static void gpu_free(topo_gpu *g)
{
    free(g->model);
    free(g->uuid);
}

static void nic_free(topo_nic *k)
{
    free(k->name);
    free(k->netdev);
}

void merak_topo_node_destroy(merak_topo_node *node)
{
    if (!node)
        return;
    for (int i = 0; i < node->ndomains; i++)
        domain_free(&node->domains[i]);
    for (int i = 0; i < node->ngpus; i++)
        gpu_free(&node->gpus[i]);
    for (int i = 0; i < node->nnics; i++)
        nic_free(&node->nics[i]);
    free(node->domains);
    free(node->numa_domain);
    free(node->gpus);
    free(node->nics);
    free(node->nvlink);
    free(node->source);
    free(node);
}

/* Grows *arr (of elem-sized items, *cap of them) to hold n + 1.  0 or -1. */
static int grow(void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return 0;
    int ncap = *cap ? 2 * *cap : 8;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

int topo_node_domain(merak_topo_node *node, hwloc_const_bitmap_t cpuset,
                     hwloc_const_bitmap_t nodeset, int *created)
{
    *created = 0;
    for (int i = 0; i < node->ndomains; i++)
        if (hwloc_bitmap_isequal(node->domains[i].cpuset, cpuset) &&
            hwloc_bitmap_isequal(node->domains[i].nodeset, nodeset))
            return i;
    if (grow((void **)&node->domains, &node->cap_domains, node->ndomains, sizeof(topo_domain)))
        return -1;
    topo_domain *d = &node->domains[node->ndomains];
    memset(d, 0, sizeof(*d));
    d->cpuset = hwloc_bitmap_dup(cpuset);
    d->nodeset = hwloc_bitmap_dup(nodeset);
    if (!d->cpuset || !d->nodeset) {
        domain_free(d);
        memset(d, 0, sizeof(*d));
        return -1;
    }
    d->numa = hwloc_bitmap_first(nodeset);
    d->package = -1;
    *created = 1;
    return node->ndomains++;
}

topo_gpu *topo_node_push_gpu(merak_topo_node *node)
{
    if (grow((void **)&node->gpus, &node->cap_gpus, node->ngpus, sizeof(topo_gpu)))
        return NULL;
    topo_gpu *g = &node->gpus[node->ngpus++];
    memset(g, 0, sizeof(*g));
    return g;
}

topo_nic *topo_node_push_nic(merak_topo_node *node)
{
    if (grow((void **)&node->nics, &node->cap_nics, node->nnics, sizeof(topo_nic)))
        return NULL;
    topo_nic *k = &node->nics[node->nnics++];
    memset(k, 0, sizeof(*k));
    return k;
}

/* Deep copy of src into a new node.  NULL on ENOMEM. */
static merak_topo_node *node_clone(const merak_topo_node *src)
{
    merak_topo_node *dst = topo_node_new(src->source);
    if (!dst)
        return NULL;
    dst->next_id = src->next_id;
    dst->this_system = src->this_system;
    dst->nvlink_known = src->nvlink_known;
    if (src->ndomains) {
        dst->domains = calloc((size_t)src->ndomains, sizeof(topo_domain));
        if (!dst->domains)
            goto fail;
        dst->cap_domains = src->ndomains;
        for (int i = 0; i < src->ndomains; i++) {
            const topo_domain *s = &src->domains[i];
            topo_domain *d = &dst->domains[i];
            dst->ndomains = i + 1;
            *d = *s;
            d->cores = NULL;
            d->ncores = 0;
            d->cpuset = hwloc_bitmap_dup(s->cpuset);
            d->nodeset = hwloc_bitmap_dup(s->nodeset);
            d->cpus = s->cpus ? strdup(s->cpus) : NULL;
            if (!d->cpuset || !d->nodeset || (s->cpus && !d->cpus))
                goto fail;
            if (s->ncores) {
                d->cores = calloc((size_t)s->ncores, sizeof(hwloc_bitmap_t));
                if (!d->cores)
                    goto fail;
                for (int c = 0; c < s->ncores; c++) {
                    d->cores[c] = hwloc_bitmap_dup(s->cores[c]);
                    if (!d->cores[c])
                        goto fail;
                    d->ncores = c + 1;
                }
            }
        }
    }
    if (src->nnumas) {
        dst->numa_domain = malloc((size_t)src->nnumas * sizeof(int));
        if (!dst->numa_domain)
            goto fail;
        memcpy(dst->numa_domain, src->numa_domain, (size_t)src->nnumas * sizeof(int));
        dst->nnumas = src->nnumas;
    }
    for (int i = 0; i < src->ngpus; i++) {
        topo_gpu *g = topo_node_push_gpu(dst);
        if (!g)
            goto fail;
        *g = src->gpus[i];
        g->model = src->gpus[i].model ? strdup(src->gpus[i].model) : NULL;
        g->uuid = src->gpus[i].uuid ? strdup(src->gpus[i].uuid) : NULL;
        if ((src->gpus[i].model && !g->model) || (src->gpus[i].uuid && !g->uuid))
            goto fail;
    }
    for (int i = 0; i < src->nnics; i++) {
        topo_nic *k = topo_node_push_nic(dst);
        if (!k)
            goto fail;
        *k = src->nics[i];
        k->name = strdup(src->nics[i].name);
        k->netdev = src->nics[i].netdev ? strdup(src->nics[i].netdev) : NULL;
        if (!k->name || (src->nics[i].netdev && !k->netdev))
            goto fail;
    }
    if (src->nvlink) {
        size_t n = (size_t)src->ngpus * (size_t)src->ngpus;
        dst->nvlink = malloc(n * sizeof(uint64_t) + 1);
        if (!dst->nvlink)
            goto fail;
        memcpy(dst->nvlink, src->nvlink, n * sizeof(uint64_t));
    }
    return dst;
fail:
    merak_topo_node_destroy(dst);
    return NULL;
}

/* ------------------------------------------------------------ paths */

const char *merak_topo_path_name(int path)
{
    static const char *const names[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS"};
    return path >= 0 && path <= MERAK_TOPO_PATH_SYS ? names[path] : "?";
}

int topo_path_class(const merak_topo_node *node, const topo_pcipath *a, int dom_a,
                    const topo_pcipath *b, int dom_b, int *hops)
{
    /* The first bridge of a's chain that b also has is their lowest common
     * ancestor; hops counts the bridges climbed on both sides. */
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->id[i] == b->id[j]) {
                int h = i + 1 + j + 1;
                if (hops)
                    *hops = h;
                if (a->host[i])
                    return MERAK_TOPO_PATH_PHB;
                return h <= 4 ? MERAK_TOPO_PATH_PIX : MERAK_TOPO_PATH_PXB;
            }
    if (hops)
        *hops = a->n + b->n;
    if (dom_a == dom_b ||
        hwloc_bitmap_intersects(node->domains[dom_a].nodeset, node->domains[dom_b].nodeset))
        return MERAK_TOPO_PATH_NODE;
    return MERAK_TOPO_PATH_SYS;
}

int topo_domain_nic_class(const merak_topo_node *node, int dom, const topo_nic *nic)
{
    return hwloc_bitmap_intersects(node->domains[dom].nodeset, node->domains[nic->domain].nodeset)
               ? MERAK_TOPO_PATH_NODE
               : MERAK_TOPO_PATH_SYS;
}

/* ------------------------------------------------------------ bus ids */

int topo_busid_normalize(const char *in, char out[TOPO_BUSID_LEN])
{
    unsigned dom = 0, bus, dev, fn;
    char tail;
    if (!in)
        return -1;
    if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
        dom = 0;
        if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
            return -1;
    }
    /* reject a sign or a "0x" that %x would accept */
    for (const char *p = in; *p; p++)
        if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
            return -1;
    if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 0x7)
        return -1;
    snprintf(out, TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

/* ------------------------------------------------------------ building by hand */

/* Domain of the NUMA node with OS index numa, or -1. */
static int numa_domain_of(const merak_topo_node *node, int numa)
{
    for (int i = 0; i < node->nnumas; i++)
        if (node->domains[node->numa_domain[i]].numa == numa &&
            hwloc_bitmap_isset(node->domains[node->numa_domain[i]].nodeset, (unsigned)numa))
            return node->numa_domain[i];
    return -1;
}

/* A device under its own root port, or under switch sw (shared with others). */
static void synth_path(merak_topo_node *node, int sw, topo_pcipath *p)
{
    memset(p, 0, sizeof(*p));
    p->id[0] = node->next_id++; /* its own port */
    if (sw >= 0) {
        p->id[1] = SYNTH_SWITCH_BASE + 2 * (uint64_t)sw;
        p->id[2] = SYNTH_SWITCH_BASE + 2 * (uint64_t)sw + 1;
        p->host[2] = 1;
        p->n = 3;
    } else {
        p->id[1] = node->next_id++;
        p->host[1] = 1;
        p->n = 2;
    }
}

int merak_topo_node_add_gpu(merak_topo_node *node, const char *busid, int numa, int pci_switch,
                            char *err, size_t errlen)
{
    char norm[TOPO_BUSID_LEN];
    if (!node)
        return topo_errf(err, errlen, EINVAL, "add_gpu: no node");
    if (topo_busid_normalize(busid, norm))
        return topo_errf(err, errlen, EINVAL, "GPU bus id '%s' is not of the form DDDD:BB:DD.F",
                         busid ? busid : "(null)");
    if (node->ngpus && strcmp(norm, node->gpus[node->ngpus - 1].busid) <= 0)
        return topo_errf(err, errlen, EINVAL, "GPU %s must come after %s: add GPUs in bus-id order",
                         norm, node->gpus[node->ngpus - 1].busid);
    int dom = numa_domain_of(node, numa);
    if (dom < 0)
        return topo_errf(err, errlen, EINVAL, "GPU %s: no NUMA node %d on this node", norm, numa);
    if (node->nvlink) { /* keep the matrix square */
        int n = node->ngpus, m = n + 1;
        uint64_t *nv = calloc((size_t)m * (size_t)m, sizeof(uint64_t));
        if (!nv)
            return topo_errf(err, errlen, ENOMEM, "out of memory");
        for (int i = 0; i < n; i++)
            memcpy(nv + (size_t)i * m, node->nvlink + (size_t)i * n, (size_t)n * sizeof(uint64_t));
        free(node->nvlink);
        node->nvlink = nv;
    }
    topo_gpu *g = topo_node_push_gpu(node);
    if (!g)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    memcpy(g->busid, norm, sizeof(norm));
    g->model = strdup("synthetic GPU");
    if (!g->model) {
        node->ngpus--;
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    }
    g->class_id = 0x0302;
    g->domain = dom;
    synth_path(node, pci_switch, &g->path);
    return node->ngpus - 1;
}

int merak_topo_node_add_nic(merak_topo_node *node, const char *name, const char *busid, int numa,
                            int pci_switch, char *err, size_t errlen)
{
    char norm[TOPO_BUSID_LEN] = "";
    if (!node)
        return topo_errf(err, errlen, EINVAL, "add_nic: no node");
    if (!name || !*name)
        return topo_errf(err, errlen, EINVAL, "a NIC needs a name");
    if (busid && topo_busid_normalize(busid, norm))
        return topo_errf(err, errlen, EINVAL, "NIC %s: bus id '%s' is not of the form DDDD:BB:DD.F",
                         name, busid);
    int dom = numa_domain_of(node, numa);
    if (dom < 0)
        return topo_errf(err, errlen, EINVAL, "NIC %s: no NUMA node %d on this node", name, numa);
    topo_nic *k = topo_node_push_nic(node);
    if (!k)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    k->name = strdup(name);
    if (!k->name) {
        node->nnics--;
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    }
    memcpy(k->busid, norm, sizeof(norm));
    k->rdma = 1;
    k->domain = dom;
    synth_path(node, pci_switch, &k->path);
    return node->nnics - 1;
}

int merak_topo_node_set_nvlink(merak_topo_node *node, int a, int b, uint64_t bandwidth, char *err,
                               size_t errlen)
{
    if (!node)
        return topo_errf(err, errlen, EINVAL, "set_nvlink: no node");
    if (a < 0 || b < 0 || a >= node->ngpus || b >= node->ngpus || a == b)
        return topo_errf(err, errlen, EINVAL, "NVLink between GPUs %d and %d: the node has %d GPUs",
                         a, b, node->ngpus);
    if (!node->nvlink) {
        node->nvlink = calloc((size_t)node->ngpus * (size_t)node->ngpus, sizeof(uint64_t));
        if (!node->nvlink)
            return topo_errf(err, errlen, ENOMEM, "out of memory");
    }
    node->nvlink[(size_t)a * node->ngpus + b] = bandwidth;
    node->nvlink[(size_t)b * node->ngpus + a] = bandwidth;
    node->nvlink_known = 1;
    return 0;
}

/* ------------------------------------------------------------ NIC selection */

/* Does entry [s, s+len) of a NCCL_IB_HCA-style list name nic? */
static int nic_matches(const topo_nic *nic, const char *s, size_t len)
{
    if (len && *s == '=') {
        s++;
        len--;
    }
    const char *colon = memchr(s, ':', len);
    if (colon)
        len = (size_t)(colon - s);
    if ((strlen(nic->name) == len && !strncmp(nic->name, s, len)) ||
        (nic->netdev && strlen(nic->netdev) == len && !strncmp(nic->netdev, s, len)))
        return 1;
    return 0;
}

int merak_topo_node_select_nics(merak_topo_node *node, const char *spec, char *err, size_t errlen)
{
    if (!node || !spec)
        return topo_errf(err, errlen, EINVAL, "select_nics: no node or list");
    int exclude = *spec == '^';
    const char *list = spec + exclude;
    /* validate first, so a bad list changes nothing */
    for (const char *p = list;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 1 && *p == '='))
            return topo_errf(err, errlen, EINVAL, "NIC list '%s' has an empty name", spec);
        if (!e)
            break;
        p = e + 1;
    }
    int kept = 0;
    for (int i = 0; i < node->nnics; i++) {
        int match = 0;
        for (const char *p = list; !match;) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            match = nic_matches(&node->nics[i], p, len);
            if (!e)
                break;
            p = e + 1;
        }
        if (match != exclude)
            node->nics[kept++] = node->nics[i];
        else
            nic_free(&node->nics[i]);
    }
    node->nnics = kept;
    return 0;
}

/* ------------------------------------------------------------ visible GPUs */

int merak_topo_node_parse_visible(const merak_topo_node *node, const char *list, int *gpus, int max,
                                  char *err, size_t errlen)
{
    if (!node || !list)
        return topo_errf(err, errlen, EINVAL, "parse_visible: no node or list");
    int n = 0;
    unsigned char *seen = calloc((size_t)node->ngpus + 1, 1);
    if (!seen)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    const char *p = list;
    while (isspace((unsigned char)*p))
        p++;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        char item[128];
        if (len == 0 || len >= sizeof(item)) {
            free(seen);
            return topo_errf(err, errlen, EINVAL, "GPU list '%s': empty or overlong entry", list);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        int idx = -1;
        if (isdigit((unsigned char)item[0])) {
            char *end;
            long v = strtol(item, &end, 10);
            if (*end || v >= node->ngpus) {
                free(seen);
                return topo_errf(err, errlen, EINVAL,
                                 "GPU list '%s': '%s' is not a GPU index below %d", list, item,
                                 node->ngpus);
            }
            idx = (int)v;
        } else if (!strncmp(item, "GPU-", 4)) {
            for (int g = 0; g < node->ngpus; g++)
                if (node->gpus[g].uuid && !strncmp(node->gpus[g].uuid, item, len)) {
                    if (idx >= 0) {
                        free(seen);
                        return topo_errf(err, errlen, EINVAL,
                                         "GPU list '%s': UUID prefix '%s' is ambiguous", list,
                                         item);
                    }
                    idx = g;
                }
            if (idx < 0) {
                free(seen);
                return topo_errf(err, errlen, EINVAL, "GPU list '%s': no GPU has UUID '%s'", list,
                                 item);
            }
        } else {
            free(seen);
            return topo_errf(err, errlen, EINVAL,
                             "GPU list '%s': '%s' is neither an index nor a GPU-UUID%s", list, item,
                             strncmp(item, "MIG-", 4) ? "" : " (MIG devices are not supported)");
        }
        if (seen[idx]) {
            free(seen);
            return topo_errf(err, errlen, EINVAL, "GPU list '%s': GPU %d is listed twice", list,
                             idx);
        }
        seen[idx] = 1;
        if (n < max && gpus)
            gpus[n] = idx;
        n++;
        if (!e)
            break;
        p = e + 1;
        while (isspace((unsigned char)*p))
            p++;
    }
    free(seen);
    return n;
}

int merak_topo_node_restrict_gpus(const merak_topo_node *node, const int *gpus, int n,
                                  merak_topo_node **out, char *err, size_t errlen)
{
    if (!node || !out || n < 0 || (n > 0 && !gpus))
        return topo_errf(err, errlen, EINVAL, "restrict_gpus: bad arguments");
    *out = NULL;
    for (int i = 0; i < n; i++) {
        if (gpus[i] < 0 || gpus[i] >= node->ngpus)
            return topo_errf(err, errlen, EINVAL, "GPU %d: the node has %d GPUs", gpus[i],
                             node->ngpus);
        for (int j = 0; j < i; j++)
            if (gpus[j] == gpus[i])
                return topo_errf(err, errlen, EINVAL, "GPU %d is listed twice", gpus[i]);
    }
    merak_topo_node *dst = node_clone(node);
    if (!dst)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    topo_gpu *kept = calloc((size_t)n + 1, sizeof(topo_gpu));
    uint64_t *nv = node->nvlink ? calloc((size_t)n * (size_t)n + 1, sizeof(uint64_t)) : NULL;
    if (!kept || (node->nvlink && !nv)) {
        free(kept);
        free(nv);
        merak_topo_node_destroy(dst);
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        kept[i] = dst->gpus[gpus[i]];
        dst->gpus[gpus[i]].model = dst->gpus[gpus[i]].uuid = NULL; /* moved */
        for (int j = 0; nv && j < n; j++)
            nv[(size_t)i * n + j] = node->nvlink[(size_t)gpus[i] * node->ngpus + gpus[j]];
    }
    for (int i = 0; i < dst->ngpus; i++)
        gpu_free(&dst->gpus[i]);
    free(dst->gpus);
    free(dst->nvlink);
    dst->gpus = kept;
    dst->ngpus = n;
    dst->cap_gpus = n + 1;
    dst->nvlink = nv;
    *out = dst;
    return 0;
}

/* ------------------------------------------------------------ queries */

const char *merak_topo_node_source(const merak_topo_node *node)
{
    return node ? node->source : NULL;
}

int merak_topo_node_ngpus(const merak_topo_node *node)
{
    return node ? node->ngpus : 0;
}

int merak_topo_node_npus(const merak_topo_node *node)
{
    return node && node->ndomains > 0 ? hwloc_bitmap_weight(node->domains[0].cpuset) : 0;
}

int merak_topo_node_is_this_system(const merak_topo_node *node)
{
    return node ? node->this_system : 0;
}

int merak_topo_node_nnumas(const merak_topo_node *node)
{
    return node ? node->nnumas : 0;
}

int merak_topo_node_nnics(const merak_topo_node *node)
{
    return node ? node->nnics : 0;
}

int merak_topo_node_gpu(const merak_topo_node *node, int i, merak_topo_gpu_info *info)
{
    if (!node || !info || i < 0 || i >= node->ngpus) {
        errno = EINVAL;
        return -1;
    }
    const topo_gpu *g = &node->gpus[i];
    const topo_domain *d = &node->domains[g->domain];
    info->busid = g->busid;
    info->vendor_id = g->vendor;
    info->device_id = g->device;
    info->class_id = g->class_id;
    info->model = g->model;
    info->uuid = g->uuid;
    info->numa = d->numa;
    info->package = d->package;
    info->cpus = d->cpus;
    return 0;
}

int merak_topo_node_numa(const merak_topo_node *node, int i, merak_topo_numa_info *info)
{
    if (!node || !info || i < 0 || i >= node->nnumas) {
        errno = EINVAL;
        return -1;
    }
    const topo_domain *d = &node->domains[node->numa_domain[i]];
    info->os_index = d->numa;
    info->package = d->package;
    info->ncores = d->ncores;
    info->cpus = d->cpus;
    return 0;
}

int merak_topo_node_nic(const merak_topo_node *node, int i, merak_topo_nic_info *info)
{
    if (!node || !info || i < 0 || i >= node->nnics) {
        errno = EINVAL;
        return -1;
    }
    const topo_nic *k = &node->nics[i];
    info->name = k->name;
    info->netdev = k->netdev;
    info->busid = k->busid[0] ? k->busid : NULL;
    info->numa = node->domains[k->domain].numa;
    info->rdma = k->rdma;
    return 0;
}

int merak_topo_node_nvlink_known(const merak_topo_node *node)
{
    return node ? node->nvlink_known : 0;
}

uint64_t merak_topo_node_nvlink(const merak_topo_node *node, int a, int b)
{
    if (!node || !node->nvlink || a < 0 || b < 0 || a >= node->ngpus || b >= node->ngpus || a == b)
        return 0;
    return node->nvlink[(size_t)a * node->ngpus + b];
}

int merak_topo_node_gpu_path(const merak_topo_node *node, int a, int b)
{
    if (!node || a < 0 || b < 0 || a >= node->ngpus || b >= node->ngpus)
        return -1;
    if (a == b)
        return MERAK_TOPO_PATH_SELF;
    return topo_path_class(node, &node->gpus[a].path, node->gpus[a].domain, &node->gpus[b].path,
                           node->gpus[b].domain, NULL);
}

int merak_topo_node_gpu_nic_path(const merak_topo_node *node, int g, int k, int *hops)
{
    if (!node || g < 0 || k < 0 || g >= node->ngpus || k >= node->nnics)
        return -1;
    return topo_path_class(node, &node->gpus[g].path, node->gpus[g].domain, &node->nics[k].path,
                           node->nics[k].domain, hops);
}
