/*
 * merak/topo.h - libmerak-topo: node topology discovery and task placement
 * for Merak's 3D-parallel grid (DESIGN.md sections 3 to 5).
 *
 * Two kinds of objects, both opaque and explicitly created and destroyed:
 *
 *   merak_topo_node       what one node looks like: its GPUs in PCI bus-id
 *                         order, NUMA nodes and their cores, NICs, the PCIe
 *                         paths between devices and, when known, the NVLink
 *                         bandwidth between GPUs.  Loaded with hwloc from the
 *                         live machine or an XML file, or built by hand from
 *                         an hwloc synthetic description plus devices.
 *   merak_topo_placement  the answer of merak_topo_place(): for every task of
 *                         a job, its Merak rank and (dp, tp, pp) coordinates,
 *                         its GPU, NUMA node, cores and NIC, plus a score.
 *
 * Placement is a pure, deterministic function of its inputs: the same request
 * gives the same placement on every node and in every run.  A task's place
 * becomes its environment (merak_topo_task_env) and its binding
 * (merak_topo_bind), the same for the Slurm plugin and for a rank placing
 * itself under mpirun.  Nothing here needs MPI or CUDA, nothing binds unless
 * asked to, and nothing prints: every function that
 * can fail returns -1 (or NULL), sets errno (EINVAL for a bad argument or a
 * request that cannot be met, ENOMEM, or the error of a failed system call)
 * and, when err is not NULL and errlen > 0, writes one line without a trailing
 * newline into err describing the problem.
 *
 * Rank order is tensor-parallel fastest, then data, then pipeline:
 *     rank = tp + TP * (dp + DP * pp)
 *
 * Thread safety: distinct objects may be used from distinct threads; one
 * object must not be modified while another thread reads it.
 */
#ifndef MERAK_TOPO_H
#define MERAK_TOPO_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#ifdef __cplusplus
extern "C" {
#endif

/** The most processing units a synthetic description may make (hwloc
 * takes seconds for 16384 and minutes for 65536). */
#define MERAK_TOPO_MAX_PUS 16384

/** Version of this API; bumped when something is added. */
#define MERAK_TOPO_API_VERSION 2

/* ====================================================================== */
/* Nodes                                                                  */
/* ====================================================================== */

/** One node's topology summary (opaque). */
typedef struct merak_topo_node merak_topo_node;

/**
 * The PCIe / memory path between two devices, in the vocabulary of
 * `nvidia-smi topo -m`, best first.  The numeric values are stable and are
 * also the "distance" that merak_topo_score.nic_dist_mean averages.
 */
enum merak_topo_path {
    MERAK_TOPO_PATH_SELF = 0, /**< the same device */
    MERAK_TOPO_PATH_PIX = 1,  /**< through at most one PCIe switch */
    MERAK_TOPO_PATH_PXB = 2,  /**< through several PCIe bridges, no host bridge */
    MERAK_TOPO_PATH_PHB = 3,  /**< through a PCIe host bridge */
    MERAK_TOPO_PATH_NODE = 4, /**< between host bridges of one NUMA locality */
    MERAK_TOPO_PATH_SYS = 5   /**< across NUMA nodes or sockets */
};

/** Returns "X", "PIX", "PXB", "PHB", "NODE" or "SYS"; "?" for other values. */
const char *merak_topo_path_name(int path);

/**
 * Loads a node's topology with hwloc: from the hwloc XML file xml_path, or
 * from the live machine when xml_path is NULL (hwloc's HWLOC_XMLFILE and
 * HWLOC_SYNTHETIC environment variables then apply as usual).  Only the CPUs
 * this process may use are seen (a Slurm cgroup restricts them).
 *
 * GPUs are PCI devices of class 0x03xx (VGA 0x0300, 3D 0x0302, display
 * 0x0380) from NVIDIA (0x10de) or AMD (0x1002), plus AMD processing
 * accelerators (0x1200); they are found without a CUDA/NVML backend and
 * ordered by PCI bus id.  NICs are PCI devices with an OpenFabrics device
 * (mlx5_0 ...); when a node has none, Ethernet/InfiniBand PCI devices with a
 * network interface (eth0 ...).  NVLink (or AMD xGMI) bandwidth comes from
 * hwloc's NVLinkBandwidth (XGMIBandwidth) matrix when the topology carries one
 * (an NVML-enabled hwloc); otherwise it is unknown, see
 * merak_topo_node_set_nvlink().
 *
 * On success stores a new node in *node (free it with
 * merak_topo_node_destroy()) and returns 0.  The hwloc topology is not kept.
 * Returns -1 if the file cannot be read, is not a regular file (a FIFO is
 * refused, never waited on) or is not an hwloc XML topology, or hwloc fails.
 * A file is read by a child process first: one that crashes hwloc (some
 * malformed files do) is refused instead of crashing the caller.  Without
 * xml_path, HWLOC_XMLFILE and HWLOC_SYNTHETIC are read here, not by hwloc:
 * a file or description hwloc would refuse (and fall back to this machine)
 * is an error naming the variable, and the node is named after it.
 */
int merak_topo_node_load(merak_topo_node **node, const char *xml_path, char *err, size_t errlen);

/**
 * Builds a node from an hwloc synthetic description of its CPUs and memory,
 * e.g. "pack:2 [numa] core:20 pu:2" (see hwloc's documentation; a synthetic
 * topology has no I/O devices: add GPUs and NICs with merak_topo_node_add_gpu()
 * and merak_topo_node_add_nic()).  Meant for tests and what-if studies.
 * Returns 0 and a new node in *node, or -1 for an invalid description or
 * one of more than MERAK_TOPO_MAX_PUS processing units.
 */
int merak_topo_node_load_synthetic(merak_topo_node **node, const char *description,
                                   char *err, size_t errlen);

/** Frees a node and everything it owns.  NULL is allowed. */
void merak_topo_node_destroy(merak_topo_node *node);

/**
 * Adds a GPU to a node (any node, usually a synthetic one).  busid is a PCI
 * bus id "DDDD:BB:DD.F" (or "BB:DD.F") and must sort after every GPU already
 * on the node, so GPUs stay in bus-id order.  numa is the OS index of the
 * NUMA node the GPU is attached to; its cores become the GPU's local cores.
 * pci_switch names the PCIe switch the device sits under (devices with the
 * same number share it, path PIX); -1 means its own root port.
 * Returns the new GPU's index, or -1 (bad bus id, order, or unknown NUMA node).
 */
int merak_topo_node_add_gpu(merak_topo_node *node, const char *busid, int numa, int pci_switch,
                            char *err, size_t errlen);

/**
 * Adds a NIC named name (an RDMA device such as "mlx5_0", or a network
 * interface), at PCI bus id busid (may be NULL), near NUMA node numa and
 * under PCIe switch pci_switch (as for merak_topo_node_add_gpu()).
 * Returns the new NIC's index, or -1.
 */
int merak_topo_node_add_nic(merak_topo_node *node, const char *name, const char *busid, int numa,
                            int pci_switch, char *err, size_t errlen);

/**
 * Sets the NVLink bandwidth between GPUs a and b (both ways) to bandwidth
 * (any unit; only ratios and zero/non-zero are used) and marks the node's
 * NVLink matrix as known: pairs never set then count as "no NVLink".  Use it
 * for nodes whose hwloc has no NVML backend (from `nvidia-smi topo -m` or a
 * site configuration).  Returns 0, or -1 if a or b is out of range or a == b.
 */
int merak_topo_node_set_nvlink(merak_topo_node *node, int a, int b, uint64_t bandwidth,
                               char *err, size_t errlen);

/**
 * Keeps only some NICs, with the syntax of NCCL_IB_HCA: a comma-separated
 * list of names to keep ("mlx5_0,mlx5_3"), or to drop when the list starts
 * with '^' ("^mlx5_1,mlx5_2"); a ":port" suffix and a leading '=' on a name
 * are ignored; names match the RDMA device or the network interface.  Names
 * that match no NIC are ignored, as NCCL does.  Use it to keep storage NICs
 * out of placement.  Returns 0, or -1 for an empty name in the list.
 */
int merak_topo_node_select_nics(merak_topo_node *node, const char *spec, char *err, size_t errlen);

/**
 * Parses a CUDA_VISIBLE_DEVICES-style list ("2,3", or NVIDIA UUIDs "GPU-8a1b...",
 * unique prefixes allowed, when the topology has them) against node's GPUs in
 * bus-id order.  Stores at most max GPU indices into gpus, in the order of the
 * list (the order CUDA numbers them), and returns how many the list holds; an
 * empty list means no GPU.  Returns -1 for an index out of range, an unknown
 * or ambiguous UUID, a MIG device, or a GPU listed twice.
 * Indices are positions in bus-id order among all the node's GPUs (hwloc sees
 * every GPU, cgroups or not): give Slurm's global ids (SLURM_STEP_GPUS or
 * SLURM_JOB_GPUS, which follow gres.conf's /dev/nvidiaN order, normally bus
 * order), not a CUDA_VISIBLE_DEVICES that Slurm renumbered from 0 under
 * ConstrainDevices; and run CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID.
 */
int merak_topo_node_parse_visible(const merak_topo_node *node, const char *list, int *gpus, int max,
                                  char *err, size_t errlen);

/**
 * Makes a new node that is node with only the n GPUs gpus[0..n-1], in that
 * order: GPU i of *out is gpus[i] of node, so with a Slurm allocation
 * (CUDA_VISIBLE_DEVICES in ascending order) the result is the visible subset
 * in bus-id order and its GPU indices are CUDA device numbers.  NVLink and
 * path information follow the GPUs.  Free *out with merak_topo_node_destroy().
 * Returns 0, or -1 for an index out of range or repeated.
 */
int merak_topo_node_restrict_gpus(const merak_topo_node *node, const int *gpus, int n,
                                  merak_topo_node **out, char *err, size_t errlen);

/* ---- queries: strings belong to the node and live as long as it does ---- */

/** Where the node came from: the XML path, "this system" or "synthetic: ...". */
const char *merak_topo_node_source(const merak_topo_node *node);

/** Number of GPUs, NUMA nodes and NICs. */
int merak_topo_node_ngpus(const merak_topo_node *node);
/** The processing units (hardware threads) of node this process may use. */
int merak_topo_node_npus(const merak_topo_node *node);
/** 1 when node was loaded from the machine this process runs on (no XML
 * file, no synthetic description): its cores are ones to bind to. */
int merak_topo_node_is_this_system(const merak_topo_node *node);
int merak_topo_node_nnumas(const merak_topo_node *node);
int merak_topo_node_nnics(const merak_topo_node *node);

/** A GPU, as merak_topo_node_gpu() describes it. */
typedef struct merak_topo_gpu_info {
    const char *busid;  /**< "0000:1b:00.0", the form cudaDeviceGetPCIBusId() gives */
    unsigned vendor_id; /**< PCI vendor (0x10de NVIDIA, 0x1002 AMD; 0 if synthetic) */
    unsigned device_id; /**< PCI device */
    unsigned class_id;  /**< PCI class (0x0302 ...) */
    const char *model;  /**< "NVIDIA H100 80GB HBM3" when hwloc knows it, else "10de:2330" */
    const char *uuid;   /**< "GPU-..." when hwloc knows it (NVML), else NULL */
    int numa;           /**< OS index of its first local NUMA node, -1 if unknown */
    int package;        /**< OS index of its package (socket), -1 if unknown */
    const char *cpus;   /**< its local cores as a list, "0-55,112-167" */
} merak_topo_gpu_info;

/** Fills *info for GPU i (bus-id order).  Returns 0, or -1 if i is out of range. */
int merak_topo_node_gpu(const merak_topo_node *node, int i, merak_topo_gpu_info *info);

/** A NUMA node, as merak_topo_node_numa() describes it. */
typedef struct merak_topo_numa_info {
    int os_index;     /**< the number Linux gives it (numactl -N) */
    int package;      /**< OS index of its package, -1 if unknown */
    int ncores;       /**< cores with at least one usable PU */
    const char *cpus; /**< its usable PUs as a list ("" for a memory-only node) */
} merak_topo_numa_info;

/** Fills *info for NUMA node i (0..nnumas-1, topology order).  Returns 0 or -1. */
int merak_topo_node_numa(const merak_topo_node *node, int i, merak_topo_numa_info *info);

/** A NIC, as merak_topo_node_nic() describes it. */
typedef struct merak_topo_nic_info {
    const char *name;   /**< "mlx5_0" (RDMA device) or the interface name for plain NICs */
    const char *netdev; /**< network interface ("ibp24s0"), NULL if none */
    const char *busid;  /**< PCI bus id, NULL if unknown */
    int numa;           /**< OS index of its first local NUMA node, -1 if unknown */
    int rdma;           /**< 1 for an OpenFabrics (RDMA) device, 0 for a plain interface */
} merak_topo_nic_info;

/** Fills *info for NIC i.  Returns 0, or -1 if i is out of range. */
int merak_topo_node_nic(const merak_topo_node *node, int i, merak_topo_nic_info *info);

/** 1 if the node's NVLink matrix is known (from hwloc or set by hand), else 0. */
int merak_topo_node_nvlink_known(const merak_topo_node *node);

/**
 * NVLink bandwidth between GPUs a and b as hwloc reports it (hwloc 2.9: MB/s,
 * e.g. 900000 between two H100 through NVSwitches); 0 if none, unknown, or a
 * or b out of range.  Through NVSwitches every pair gets the bandwidth of the
 * switch paths (hwloc's transitive closure); without switches only direct
 * links count.
 */
uint64_t merak_topo_node_nvlink(const merak_topo_node *node, int a, int b);

/** PCIe path (enum merak_topo_path) between GPUs a and b; -1 if out of range. */
int merak_topo_node_gpu_path(const merak_topo_node *node, int a, int b);

/**
 * PCIe path between GPU g and NIC k; stores the number of PCIe bridges on the
 * way into *hops when hops is not NULL.  Returns -1 if out of range.
 */
int merak_topo_node_gpu_nic_path(const merak_topo_node *node, int g, int k, int *hops);

/**
 * Pairs each GPU with a NIC the way merak_topo_place() does when a task runs
 * on every GPU: one global greedy pass over all (GPU, NIC) pairs, closest path
 * first (then fewest PCIe hops), each NIC taking at most ceil(GPUs / NICs)
 * GPUs, counting only NICs within PXB of some GPU when there are any.  Stores
 * ngpus NIC indices (-1 when the node has no NIC) into nic.  Returns 0 or -1.
 */
int merak_topo_node_pair_nics(const merak_topo_node *node, int *nic, char *err, size_t errlen);

/* ====================================================================== */
/* Placement                                                              */
/* ====================================================================== */

/** How Slurm numbers the tasks of a job across its nodes (srun --distribution). */
enum merak_topo_distribution {
    MERAK_TOPO_DIST_BLOCK = 0, /**< consecutive task ids on a node */
    MERAK_TOPO_DIST_CYCLIC = 1 /**< task ids dealt round-robin over the nodes */
};

/**
 * Parses "block" or "cyclic", alone or as the first part of a Slurm
 * distribution such as "block:cyclic" (the part after ':' says how CPUs are
 * dealt inside a node, which placement decides itself).  Returns 0 and sets
 * *dist, or -1 for anything else ("plane", "arbitrary", ...).
 */
int merak_topo_distribution_parse(const char *s, int *dist, char *err, size_t errlen);

/**
 * Parses a task count per node: "8" (one node), a comma list "8,8,4", or
 * Slurm's SLURM_TASKS_PER_NODE form "8(x2),4".  Stores a malloc'ed array into
 * *counts (free() it) and its length into *nnodes.  Returns 0, or -1 for a
 * malformed list or a count below 1.
 */
int merak_topo_tasks_per_node_parse(const char *s, int **counts, int *nnodes, char *err,
                                    size_t errlen);

/** What to place. */
typedef struct merak_topo_request {
    int nnodes;                 /**< nodes of the job (Slurm node order, SLURM_NODEID) */
    const int *tasks_per_node;  /**< [nnodes] tasks on each node, >= 1, may differ */
    /**
     * [nnodes] each node's topology; the same pointer may repeat (identical
     * nodes are then worked out once).  An entry, or the whole array, may be
     * NULL for "unknown": such a node gets ranks and coordinates only (gpu -1,
     * no cores, no NIC).  Ranks never depend on the topologies, so a node that
     * knows only itself computes the same ranks as the whole job.
     */
    const merak_topo_node *const *nodes;
    int dp, tp, pp;             /**< degrees, each >= 1; dp*tp*pp = total tasks */
    int distribution;           /**< enum merak_topo_distribution */
} merak_topo_request;

/** One task's place. */
typedef struct merak_topo_task {
    int node;              /**< node index, 0..nnodes-1 */
    int local_task;        /**< index among the node's tasks (SLURM_LOCALID) */
    int procid;            /**< task id the distribution gives it (SLURM_PROCID) */
    int rank;              /**< Merak rank, tp + TP*(dp + DP*pp) */
    int dp, tp, pp;        /**< grid coordinates */
    int gpu;               /**< index among the node's GPUs (bus-id order), -1 if none */
    const char *gpu_busid; /**< that GPU's PCI bus id, NULL if none */
    int numa;              /**< OS index of the NUMA node of its cores, -1 if unknown */
    const char *cpus;      /**< its cores as a list ("0-13,112-125"), NULL if unknown */
    const char *nic;       /**< its NIC ("mlx5_0"), NULL if none */
    int nic_path;          /**< enum merak_topo_path to the NIC from its GPU or cores; -1 */
} merak_topo_task;

/** How good a placement is (DESIGN.md section 5). */
typedef struct merak_topo_score {
    int tp_pairs;          /**< pairs of tasks in one tp group */
    int tp_pairs_known;    /**< of those, on nodes whose NVLink matrix is known */
    int tp_pairs_nvlink;   /**< of those, whose GPUs have an NVLink path */
    double tp_nvlink_frac; /**< tp_pairs_nvlink / tp_pairs_known; -1 when unknown */
    int tp_cross_node;     /**< tp groups spanning nodes: always 0 (else refused) */
    int pp_links;          /**< neighbour pairs (stage s, s+1), counted per task */
    int pp_cross_node;     /**< of those, on different nodes */
    int dp_links;          /**< neighbour pairs (dp d, d+1), counted per task */
    int dp_cross_node;     /**< of those, on different nodes */
    int dp_rail_aligned;   /**< of those crossing, with the same local GPU index */
    double nic_dist_mean;  /**< mean enum merak_topo_path to the task's NIC; -1 if no NIC */
    double nic_hops_mean;  /**< mean PCIe hops GPU-NIC over GPU tasks with a NIC; -1 if none */
    int nic_max_load;      /**< most tasks sharing one NIC on one node */
    int renumbered;        /**< 1 if some task's rank differs from its procid */
} merak_topo_score;

/** A computed placement (opaque). */
typedef struct merak_topo_placement merak_topo_placement;

/**
 * Places every task of req.  Rules, in order: every tp group on one node and
 * inside the best-connected set of its GPUs (NVLink, then PCIe switch, host
 * bridge, NUMA node, socket); pipeline neighbours on one node where they
 * fit; dp peers at the same local GPU index (same rail); each task's cores
 * on its GPU's NUMA locality, split evenly among the tasks that share it;
 * NICs by a global greedy over (GPU, NIC) pairs with a cap per NIC.  Ranks
 * are renumbered away from the task ids whenever that serves the rules (always
 * for a cyclic distribution that would split tp groups).
 *
 * Refuses (returns -1, errno EINVAL, and a message naming srun flags that
 * would work) when dp*tp*pp differs from the number of tasks, when a node has
 * fewer than tp tasks or a number of tasks that is not a multiple of tp, or
 * when a node has more tasks than GPUs (GPU nodes only).
 * On success stores a new placement in *out (free it with
 * merak_topo_placement_destroy()); it keeps no pointer into req or the nodes.
 */
int merak_topo_place(const merak_topo_request *req, merak_topo_placement **out, char *err,
                     size_t errlen);

/** Frees a placement.  NULL is allowed. */
void merak_topo_placement_destroy(merak_topo_placement *p);

/** Number of tasks (the sum of tasks_per_node). */
int merak_topo_placement_ntasks(const merak_topo_placement *p);

/**
 * Task i, in (node, local_task) order; NULL if out of range.  The task and
 * its strings belong to p and live as long as it does.
 */
const merak_topo_task *merak_topo_placement_task(const merak_topo_placement *p, int i);

/** The task at (node, local_task), or NULL. */
const merak_topo_task *merak_topo_placement_find(const merak_topo_placement *p, int node,
                                                 int local_task);

/** The task with Merak rank rank, or NULL. */
const merak_topo_task *merak_topo_placement_by_rank(const merak_topo_placement *p, int rank);

/** The placement's score; belongs to p. */
const merak_topo_score *merak_topo_placement_score(const merak_topo_placement *p);

/* ====================================================================== */
/* A task's environment and binding (DESIGN.md section 4)                 */
/* ====================================================================== */

/**
 * Sets one environment variable for the caller: returns 0, or -1 when it
 * could not.  overwrite 0: a value already set is kept (the user's choice).
 */
typedef int (*merak_topo_setenv_fn)(void *arg, const char *name, const char *value, int overwrite);

/**
 * The environment of task t of a dp x tp x pp placement on node (the node t
 * runs on, NULL when unknown), through set(arg, ...): MERAK_DP, MERAK_TP,
 * MERAK_PP, MERAK_RANK, MERAK_WORLD_SIZE, MERAK_DP_RANK, MERAK_TP_RANK,
 * MERAK_PP_RANK; with a GPU, MERAK_GPU, MERAK_GPU_BUSID and
 * CUDA_DEVICE_ORDER=PCI_BUS_ID (kept if set); with a NIC, MERAK_NIC,
 * UCX_NET_DEVICES (an RDMA device with its port, "mlx5_0:1"; kept if set)
 * and for an RDMA device NCCL_IB_HCA (kept if set).  MERAK_CPUS is set by
 * whoever binds (it names the cores the task is bound to).  Returns 0, or
 * -1 at the first set that fails.
 */
int merak_topo_task_env(const merak_topo_task *t, const merak_topo_node *node, int dp, int tp, int pp,
                        merak_topo_setenv_fn set, void *arg);

/**
 * Binds every thread of the calling process to the cores in list (hwloc's
 * list syntax, "0-13,112-125", as merak_topo_task.cpus).  Returns 0, or -1
 * with errno and a line in err (a list naming cores this machine does not
 * let the process use: "a topology that is not this node's?").
 */
int merak_topo_bind(const char *list, char *err, size_t errlen);

/**
 * 1 when the calling thread is already bound: its CPU affinity leaves out
 * some core node says this process may use (mpirun --bind-to, taskset, a
 * job launcher); 0 when it may run anywhere on node; -1 with errno when the
 * affinity cannot be read.  node should be this machine's.
 */
int merak_topo_bound(const merak_topo_node *node);

#ifdef __cplusplus
}
#endif

#endif
