/*
 * discover.c - load a topology with hwloc (live, XML or synthetic) and turn
 * it into a node summary: NUMA nodes and cores, GPUs by PCI class and vendor
 * (Debian's hwloc has no CUDA/NVML backend), NICs, PCIe bridge chains, and
 * the NVLink matrix when the topology carries one.  The topology is destroyed
 * before returning; see ../shared/notes/hwloc-placement.md for the hwloc facts
 * this relies on.
 */
#include "topo_internal.h"

#include <errno.h>  /* errno, EINVAL, ENOMEM */
#include <signal.h> /* signal, strsignal's numbers */
#include <stdio.h>  /* fopen, snprintf */
#include <stdlib.h> /* calloc, free, getenv, qsort */
#include <string.h> /* strcmp, strdup, strerror */
#include <fcntl.h>        /* open */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h>     /* fstat */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* fork, _exit */

#define VENDOR_NVIDIA 0x10de
#define VENDOR_AMD 0x1002

static int is_gpu(const struct hwloc_pcidev_attr_s *pci)
{
    if (pci->vendor_id != VENDOR_NVIDIA && pci->vendor_id != VENDOR_AMD)
        return 0;
    /* display class (0x0300 VGA, 0x0302 3D, 0x0380 other; NVSwitch is
     * 0x0680), or an AMD Instinct that calls itself a processing accelerator */
    return (pci->class_id >> 8) == 0x03 ||
           (pci->vendor_id == VENDOR_AMD && pci->class_id == 0x1200);
}

static void pci_busid(hwloc_obj_t o, char out[TOPO_BUSID_LEN])
{
    snprintf(out, TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", o->attr->pcidev.domain & 0xffffu,
             o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
}

/* The first OS device child of pci with the given type, or NULL. */
static hwloc_obj_t osdev_child(hwloc_obj_t pci, hwloc_obj_osdev_type_t type)
{
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == type)
            return c;
    return NULL;
}

/* The first value of info name among pci's OS devices, or NULL. */
static const char *osdev_info(hwloc_obj_t pci, const char *name)
{
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
        const char *v = c->type == HWLOC_OBJ_OS_DEVICE ? hwloc_obj_get_info_by_name(c, name) : NULL;
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Bridges above an I/O object, nearest first.  Walked by hand:
 * hwloc_get_common_ancestor_obj() crashes on I/O objects in hwloc 2.9. */
static void pci_path(hwloc_obj_t o, topo_pcipath *p)
{
    memset(p, 0, sizeof(*p));
    for (hwloc_obj_t b = o->parent; b && b->type == HWLOC_OBJ_BRIDGE && p->n < TOPO_MAX_BRIDGES;
         b = b->parent) {
        p->id[p->n] = b->gp_index;
        p->host[p->n] = b->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
        p->n++;
    }
}

/* Fills a new domain's package, cores and list string from the topology;
 * obj is an object with that locality (for the package). */
static int fill_domain(hwloc_topology_t t, topo_domain *d, hwloc_obj_t obj)
{
    for (hwloc_obj_t p = obj; p; p = p->parent)
        if (p->type == HWLOC_OBJ_PACKAGE) {
            d->package = (int)p->os_index;
            break;
        }
    /* above the packages (the machine, on a one-socket node): the package
     * that holds all its cores, if one does */
    for (hwloc_obj_t p = NULL; d->package < 0 && !hwloc_bitmap_iszero(d->cpuset) &&
                               (p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, p));)
        if (hwloc_bitmap_isincluded(d->cpuset, p->cpuset))
            d->package = (int)p->os_index;
    hwloc_obj_type_t ctype =
        hwloc_get_type_depth(t, HWLOC_OBJ_CORE) >= 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = 0;
    for (hwloc_obj_t c = NULL;
         (c = hwloc_get_next_obj_inside_cpuset_by_type(t, d->cpuset, ctype, c));)
        n++;
    if (n) {
        d->cores = calloc((size_t)n, sizeof(hwloc_bitmap_t));
        if (!d->cores)
            return -1;
        for (hwloc_obj_t c = NULL; d->ncores < n && (c = hwloc_get_next_obj_inside_cpuset_by_type(
                                                         t, d->cpuset, ctype, c));) {
            d->cores[d->ncores] = hwloc_bitmap_dup(c->cpuset);
            if (!d->cores[d->ncores])
                return -1;
            d->ncores++;
        }
    }
    if (hwloc_bitmap_list_asprintf(&d->cpus, d->cpuset) < 0)
        return -1;
    return 0;
}

/* Domain index for the CPU-side locality of obj (an I/O object, a NUMA node,
 * or the root), creating and filling it if new.  -1 on ENOMEM. */
static int domain_of(hwloc_topology_t t, merak_topo_node *node, hwloc_obj_t obj)
{
    hwloc_obj_t anc = obj->type == HWLOC_OBJ_NUMANODE || obj->cpuset
                          ? obj
                          : hwloc_get_non_io_ancestor_obj(t, obj);
    if (!anc || !anc->cpuset || !anc->nodeset)
        return 0; /* the whole machine */
    int created;
    int i = topo_node_domain(node, anc->cpuset, anc->nodeset, &created);
    if (i >= 0 && created && fill_domain(t, &node->domains[i], anc))
        return -1;
    return i;
}

static int busid_cmp(const void *a, const void *b)
{
    char x[TOPO_BUSID_LEN], y[TOPO_BUSID_LEN];
    pci_busid(*(hwloc_obj_t const *)a, x);
    pci_busid(*(hwloc_obj_t const *)b, y);
    return strcmp(x, y);
}

/* Copies the NVLinkBandwidth (or XGMIBandwidth) matrix between node's GPUs
 * (whose PCI objects are gpu_objs) into node->nvlink. */
static int read_nvlink(hwloc_topology_t t, merak_topo_node *node, hwloc_obj_t *gpu_objs)
{
    static const char *const names[] = {"NVLinkBandwidth", "XGMIBandwidth"};
    int G = node->ngpus;
    if (G < 2)
        return 0;
    for (size_t nm = 0; nm < sizeof(names) / sizeof(names[0]); nm++) {
        struct hwloc_distances_s *d = NULL;
        unsigned nr = 1;
        if (hwloc_distances_get_by_name(t, names[nm], &nr, &d, 0) != 0 || nr == 0 || !d)
            continue;
        /* Through NVSwitches: merge the switch ports, then connect GPU pairs
         * across them.  Without a switch the closure zeroes every value
         * (hwloc 2.9), so apply it only after a successful merge. */
        if (hwloc_distances_transform(t, d, HWLOC_DISTANCES_TRANSFORM_MERGE_SWITCH_PORTS, NULL,
                                      0) == 0)
            (void)hwloc_distances_transform(t, d, HWLOC_DISTANCES_TRANSFORM_TRANSITIVE_CLOSURE,
                                            NULL, 0);
        int *map = malloc((d->nbobjs + 1) * sizeof(int));
        if (!map) {
            hwloc_distances_release(t, d);
            return -1;
        }
        int found = 0;
        for (unsigned i = 0; i < d->nbobjs; i++) {
            hwloc_obj_t o = d->objs[i];
            map[i] = -1;
            if (o && o->type == HWLOC_OBJ_OS_DEVICE)
                o = o->parent;
            for (int g = 0; o && g < G; g++)
                if (gpu_objs[g] == o) {
                    map[i] = g;
                    found++;
                    break;
                }
        }
        if (found) {
            node->nvlink = calloc((size_t)G * G, sizeof(uint64_t));
            if (!node->nvlink) {
                free(map);
                hwloc_distances_release(t, d);
                return -1;
            }
            for (unsigned i = 0; i < d->nbobjs; i++)
                for (unsigned j = 0; j < d->nbobjs; j++)
                    if (map[i] >= 0 && map[j] >= 0 && map[i] != map[j])
                        node->nvlink[(size_t)map[i] * G + map[j]] = d->values[i * d->nbobjs + j];
            node->nvlink_known = 1;
        }
        free(map);
        hwloc_distances_release(t, d);
        if (found)
            return 0;
    }
    return 0;
}

static int nic_cmp(const void *a, const void *b)
{
    const topo_nic *x = a, *y = b;
    int c = strcmp(x->busid, y->busid);
    return c ? c : strcmp(x->name, y->name);
}

/* Adds the NICs, in bus-id order: PCI devices with an OpenFabrics device,
 * or (when there is none) network-class PCI devices with an interface. */
static int read_nics(hwloc_topology_t t, merak_topo_node *node)
{
    for (int pass = 0; pass < 2 && node->nnics == 0; pass++) {
        for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t, o));) {
            hwloc_obj_t ofed = osdev_child(o, HWLOC_OBJ_OSDEV_OPENFABRICS);
            hwloc_obj_t net = osdev_child(o, HWLOC_OBJ_OSDEV_NETWORK);
            const char *name =
                pass == 0 ? (ofed ? ofed->name : NULL)
                          : ((o->attr->pcidev.class_id >> 8) == 0x02 && net ? net->name : NULL);
            if (!name || !*name)
                continue;
            int dom = domain_of(t, node, o);
            topo_nic *k = dom >= 0 ? topo_node_push_nic(node) : NULL;
            if (!k)
                return -1;
            k->rdma = pass == 0;
            k->domain = dom;
            k->name = strdup(name);
            k->netdev = net && net->name ? strdup(net->name) : NULL;
            if (!k->name || (net && net->name && !k->netdev))
                return -1;
            pci_busid(o, k->busid);
            pci_path(o, &k->path);
        }
    }
    if (node->nnics > 1)
        qsort(node->nics, (size_t)node->nnics, sizeof(topo_nic), nic_cmp);
    return 0;
}

static int summarize(hwloc_topology_t t, const char *source, merak_topo_node **out, char *err,
                     size_t errlen)
{
    merak_topo_node *node = topo_node_new(source);
    hwloc_obj_t *gpu_objs = NULL;
    if (!node)
        goto nomem;
    if (domain_of(t, node, hwloc_get_root_obj(t)) != 0) /* domain 0: the machine */
        goto nomem;
    int nnuma = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    node->numa_domain = calloc((size_t)(nnuma > 0 ? nnuma : 1), sizeof(int));
    if (!node->numa_domain)
        goto nomem;
    for (hwloc_obj_t o = NULL;
         node->nnumas < nnuma && (o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, o));) {
        int dom = domain_of(t, node, o);
        if (dom < 0)
            goto nomem;
        node->numa_domain[node->nnumas++] = dom;
    }

    int G = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t, o));)
        G += is_gpu(&o->attr->pcidev);
    gpu_objs = calloc((size_t)G + 1, sizeof(hwloc_obj_t));
    if (!gpu_objs)
        goto nomem;
    G = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t, o));)
        if (is_gpu(&o->attr->pcidev))
            gpu_objs[G++] = o;
    if (G > 1)
        qsort(gpu_objs, (size_t)G, sizeof(hwloc_obj_t), busid_cmp);
    for (int i = 0; i < G; i++) {
        hwloc_obj_t o = gpu_objs[i];
        int dom = domain_of(t, node, o);
        topo_gpu *g = dom >= 0 ? topo_node_push_gpu(node) : NULL;
        if (!g)
            goto nomem;
        pci_busid(o, g->busid);
        g->vendor = o->attr->pcidev.vendor_id;
        g->device = o->attr->pcidev.device_id;
        g->class_id = o->attr->pcidev.class_id;
        g->domain = dom;
        pci_path(o, &g->path);
        const char *model = osdev_info(o, "GPUModel");
        char id[16];
        snprintf(id, sizeof(id), "%04x:%04x", g->vendor & 0xffffu, g->device & 0xffffu);
        g->model = strdup(model ? model : id);
        const char *uuid = osdev_info(o, "NVIDIAUUID");
        if (!uuid)
            uuid = osdev_info(o, "AMDUUID");
        g->uuid = uuid ? strdup(uuid) : NULL;
        if (!g->model || (uuid && !g->uuid))
            goto nomem;
    }
    if (read_nics(t, node) || read_nvlink(t, node, gpu_objs))
        goto nomem;
    free(gpu_objs);
    *out = node;
    return 0;
nomem:
    free(gpu_objs);
    merak_topo_node_destroy(node);
    return topo_errf(err, errlen, ENOMEM, "%s: out of memory reading the topology", source);
}

/* A new hwloc topology that keeps I/O objects, reading xml_path if not
 * NULL; 0, or -1 with errno. */
static int topology_init(hwloc_topology_t *t, const char *xml_path)
{
    if (hwloc_topology_init(t) != 0)
        return -1;
    /* I/O objects are dropped by default, also from XML: keep GPUs, NICs and
     * the bridges above them. */
    if (hwloc_topology_set_io_types_filter(*t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        (xml_path && hwloc_topology_set_xml(*t, xml_path) != 0)) {
        int e = errno;
        hwloc_topology_destroy(*t);
        errno = e;
        return -1;
    }
    return 0;
}

/* hwloc reads some malformed XML files into a crash (hwloc 2.9: a NULL
 * cpuset in hwloc_bitmap_compare_first), which would take the caller
 * down with it, and others with warnings it prints only when asked
 * (HWLOC_XML_VERBOSE), dropping what it could not read (a GPU whose
 * pci_busid is malformed): a child process reads the file first, with
 * the warnings on and its standard error into a pipe.  Returns the signal
 * that ended the child, or 0 when it got through (loaded or refused the
 * file); warn gets the first line hwloc printed ("" if none). */
static int xml_check_in_child(const char *xml_path, char *warn, size_t warnlen)
{
    int fds[2];
    warn[0] = 0;
    if (pipe(fds) < 0)
        return 0;   /* no child: read it here, as without the check */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        /* a crash here is the answer: no core file, no report (a
         * sanitizer's or UCX's handler would print one) */
        const struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
            signal(fatal[i], SIG_DFL);
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        setenv("HWLOC_XML_VERBOSE", "1", 1);
        hwloc_topology_t t;
        if (topology_init(&t, xml_path) == 0) {
            (void)hwloc_topology_load(t);
            hwloc_topology_destroy(t);
        }
        _exit(0);
    }
    close(fds[1]);
    size_t used = 0;
    char buf[512];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        for (ssize_t k = 0; k < n && used + 1 < warnlen; k++) /* the first line */
            if (!(used == 0 && (buf[k] == '\n' || buf[k] == ' ')) && !strchr(warn, '\n'))
                warn[used++] = buf[k], warn[used] = 0;
    }
    close(fds[0]);
    char *nl = strchr(warn, '\n');
    if (nl)
        *nl = 0;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

/* An hwloc XML file, named in messages as label (the path, or
 * "HWLOC_XMLFILE=path"): a regular file this process can read, that hwloc
 * reads without crashing and accepts. */
static int load_xml(merak_topo_node **node, const char *path, const char *label, char *err, size_t errlen)
{
    /* O_NONBLOCK: a FIFO is refused, never waited on */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return topo_errf(err, errlen, errno, "%s: cannot read: %s", label, strerror(errno));
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular)
        return topo_errf(err, errlen, EINVAL, "%s: not a regular file (an hwloc XML topology is one)", label);
    char warn[256];
    int sig = xml_check_in_child(path, warn, sizeof warn);
    if (sig)
        return topo_errf(err, errlen, EINVAL, "%s: not a well-formed hwloc XML topology (hwloc crashed reading it: %s)",
                         label, strsignal(sig));
    hwloc_topology_t t;
    if (topology_init(&t, path) != 0)
        return topo_errf(err, errlen, EINVAL, "%s: not an hwloc XML topology%s%s%s", label, warn[0] ? " (" : "",
                         warn, warn[0] ? ")" : "");
    if (hwloc_topology_load(t) != 0) {
        int e = errno;
        hwloc_topology_destroy(t);
        return topo_errf(err, errlen, e ? e : EINVAL, "%s: hwloc cannot load the topology: %s", label,
                         strerror(e ? e : EINVAL));
    }
    if (warn[0]) { /* hwloc's warnings are errors: it dropped what it warned about */
        hwloc_topology_destroy(t);
        return topo_errf(err, errlen, EINVAL, "%s: hwloc does not read it cleanly: %s", label, warn);
    }
    int rc = summarize(t, label, node, err, errlen);
    hwloc_topology_destroy(t);
    return rc;
}

/* The processing units a synthetic description makes: the product of
 * its levels' counts ("pack:2 core:8 pu:2" or "2 8 2"; a level without a
 * count is 1), at most MERAK_TOPO_MAX_PUS + 1.  hwloc checks the rest. */
static long synthetic_pus(const char *d)
{
    long n = 1;
    while (*d) {
        while (*d == ' ' || *d == '\t' || *d == '\n')
            d++;
        if (!*d)
            break;
        const char *tok = d, *colon = NULL;
        while (*d && *d != ' ' && *d != '\t' && *d != '\n') {
            if (*d == ':' && !colon)
                colon = d;
            d++;
        }
        const char *num = colon ? colon + 1 : tok;
        if (*num >= '0' && *num <= '9') {
            long c = strtol(num, NULL, 10);
            if (c > MERAK_TOPO_MAX_PUS || n * (c > 0 ? c : 1) > MERAK_TOPO_MAX_PUS)
                return MERAK_TOPO_MAX_PUS + 1;
            n *= c > 0 ? c : 1;
        }
    }
    return n;
}

/* A synthetic description, named in messages as label. */
static int load_synthetic(merak_topo_node **node, const char *description, const char *label, char *err,
                          size_t errlen)
{
    if (synthetic_pus(description) > MERAK_TOPO_MAX_PUS)
        return topo_errf(err, errlen, EINVAL, "%s: more than %d processing units (hwloc would take minutes)",
                         label, MERAK_TOPO_MAX_PUS);
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return topo_errf(err, errlen, errno ? errno : ENOMEM, "hwloc_topology_init failed");
    if (hwloc_topology_set_synthetic(t, description) != 0 || hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return topo_errf(err, errlen, EINVAL, "%s: not a synthetic description hwloc accepts", label);
    }
    int rc = summarize(t, label, node, err, errlen);
    hwloc_topology_destroy(t);
    return rc;
}

int merak_topo_node_load(merak_topo_node **node, const char *xml_path, char *err, size_t errlen)
{
    if (!node)
        return topo_errf(err, errlen, EINVAL, "node_load: no result pointer");
    *node = NULL;
    char label[600];
    if (xml_path)
        return load_xml(node, xml_path, xml_path, err, errlen);
    /* hwloc's own variables, read here so that a file or description
     * hwloc refuses is an error, not this machine under its name */
    const char *xml = getenv("HWLOC_XMLFILE"), *syn = getenv("HWLOC_SYNTHETIC");
    if (xml && *xml) {
        snprintf(label, sizeof label, "HWLOC_XMLFILE=%.500s", xml);
        return load_xml(node, xml, label, err, errlen);
    }
    if (syn && *syn) {
        snprintf(label, sizeof label, "HWLOC_SYNTHETIC=%.500s", syn);
        return load_synthetic(node, syn, label, err, errlen);
    }
    hwloc_topology_t t;
    if (topology_init(&t, NULL) != 0)
        return topo_errf(err, errlen, errno ? errno : ENOMEM, "hwloc cannot start: %s", strerror(errno));
    if (hwloc_topology_load(t) != 0) {
        int e = errno;
        hwloc_topology_destroy(t);
        return topo_errf(err, errlen, e ? e : EINVAL, "this system: hwloc cannot load the topology: %s",
                         strerror(e ? e : EINVAL));
    }
    int rc = summarize(t, "this system", node, err, errlen);
    if (rc == 0)
        (*node)->this_system = hwloc_topology_is_thissystem(t);
    hwloc_topology_destroy(t);
    return rc;
}

int merak_topo_node_load_synthetic(merak_topo_node **node, const char *description, char *err, size_t errlen)
{
    if (!node || !description)
        return topo_errf(err, errlen, EINVAL, "node_load_synthetic: bad arguments");
    *node = NULL;
    char label[600];
    snprintf(label, sizeof label, "synthetic: %.500s", description);
    return load_synthetic(node, description, label, err, errlen);
}
