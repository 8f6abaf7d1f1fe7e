/* SPDX-License-Identifier: BSD-3-Clause */
/* kvlane configuration: the parsed, validated contents of an INI file under config/. */
#ifndef KVL_RUNTIME_CONFIG_H
#define KVL_RUNTIME_CONFIG_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Pure C: no DPDK, verbs or CUDA headers here, so the unit suite needs no EAL. */

#define KVL_MAX_NICS	 16
#define KVL_MAX_SEG_CONF 16
/* Data connections a peer may hold over all NICs (runtime/peers.h KVL_PEER_MAX_CONNS). */
#define KVL_CONF_MAX_PEER_CONNS 32
#define KVL_MAX_PEERS		32
#define KVL_NAME_LEN		64 /* runtime.name, nic device names */
#define KVL_LABEL_LEN		32 /* the part after "nic." in a section name */
#define KVL_ADDR_LEN		80 /* host:port, [v6]:port */
#define KVL_PATH_LEN		256
#define KVL_MAX_SECT_KEYS	24
#define KVL_PCI_ADDR_LEN	20 /* "0000:3b:00.0"; domains above 0xffff (VMD) print longer */

enum kvl_idle_policy {
	KVL_IDLE_POLL = 0, /* spin: lowest latency, one core at 100% */
	KVL_IDLE_YIELD,	   /* sched_yield() when idle: for shared cores and CI */
	KVL_IDLE_HYBRID,   /* spin while busy, nap once idle for hybrid_idle_us */
};

enum kvl_transport {
	KVL_TRANSPORT_AUTO = 0,
	KVL_TRANSPORT_MLX5,
	KVL_TRANSPORT_VERBS,
	KVL_TRANSPORT_TCP,
};

/* A yes/no key that also accepts "auto" (decided at start-up from what the host has). */
enum kvl_tristate {
	KVL_TRI_OFF = 0,
	KVL_TRI_ON = 1,
	KVL_TRI_AUTO = 2,
};

#define KVL_AUTO (-1) /* stored in int keys that accept "auto" (gid_index, numa_node) */

struct kvl_runtime_conf {
	char name[KVL_NAME_LEN];
	int idle_policy; /* enum kvl_idle_policy */
	uint32_t hybrid_idle_us;
	uint32_t hybrid_sleep_us;
	bool allow_remote_numa;
};

struct kvl_nic_conf {
	char label[KVL_LABEL_LEN]; /* [nic.<label>]; first, as in every repeated section */
	char device[KVL_NAME_LEN]; /* RDMA device (mlx5_0, rxe0) or netdev (lo) for tcp */
	uint32_t port;
	int transport; /* enum kvl_transport */
	int gid_index; /* KVL_AUTO or 0..255 */
	uint32_t mtu;
	uint32_t traffic_class;
	uint32_t service_level;
	uint32_t pkey_index;
	uint32_t ack_timeout; /* RC local ACK timeout: 4.096 us << n per try (1..31) */
	uint32_t retry_count; /* RC transport retries before the request fails (1..6) */
	uint32_t qp_count;
	uint32_t queue_depth;
	int numa_node;	    /* KVL_AUTO or 0..1023 */
	uint32_t data_port; /* tcp: port of the data listener (0: any free port) */
	/* GPU paired with this NIC: "auto", "none", a GPU index ("0") in PCI-address order or
	 * a PCI address, normalised ("0000:3b:00.0"); checked against the host at start */
	char gpu[KVL_PCI_ADDR_LEN];
	/* issue 20: a peer on this host whose GPU segments this NIC's GPU can reach is read
	 * through CUDA IPC instead of this transport (KVL_IPC_AUTO), or never (KVL_IPC_OFF) */
	int ipc;
};

enum kvl_ipc_mode {
	KVL_IPC_AUTO = 0,
	KVL_IPC_OFF = 1,
};

enum kvl_seg_access {
	KVL_ACCESS_READ = 0, /* peers may read it (a KV tier serving prefill output) */
	KVL_ACCESS_WRITE,    /* peers may write it (a decode node receiving pushes) */
	KVL_ACCESS_READWRITE,
};

enum kvl_seg_fill {
	KVL_FILL_ZERO = 0,
	KVL_FILL_PATTERN, /* kvl_pattern_fill(): peers can verify every byte they read */
};

enum kvl_seg_memory {
	KVL_SEG_MEM_HOST = 0, /* DPDK memory on the first NIC's NUMA node */
	KVL_SEG_MEM_GPU,      /* VRAM of GPU @gpu (cudaMalloc) */
};

/* [sched] staging: where each NIC lcore's PULL staging lives. */
enum kvl_staging_place {
	KVL_STAGING_AUTO = 0, /* gpu when [gpu] enable = true and the build has CUDA, else host */
	KVL_STAGING_HOST,
	KVL_STAGING_GPU,
};

/* [sched] tier_copy: how the host tier's copy engine moves blocks under its copy_min (1 MiB)
 * into VRAM staging (lcores/gpu/xport_cudma.h enum kvl_cudma_small, same order after auto). */
enum kvl_tier_copy {
	KVL_TIER_COPY_AUTO =
		0,	      /* per batch, from the scheduler's compute and step-bytes estimates */
	KVL_TIER_COPY_GATHER, /* the gather kernel (copies of 32 KiB and up on the engine) */
	KVL_TIER_COPY_BATCH,  /* cudaMemcpyBatchAsync on the copy engine */
	KVL_TIER_COPY_EACH,   /* one cudaMemcpyAsync a copy */
};

/* [segment.<label>]: KV memory kvlaned hosts for its peers, laid out as
 * layers x planes (K, V) x blocks of block_bytes. */
struct kvl_segment_conf {
	char label[KVL_LABEL_LEN];
	uint32_t layers;
	uint32_t planes;
	uint32_t blocks;
	uint32_t block_bytes;
	int access; /* enum kvl_seg_access */
	int fill;   /* enum kvl_seg_fill */
	uint32_t pattern_seed;
	int memory;   /* enum kvl_seg_memory */
	uint32_t gpu; /* memory = gpu: the CUDA device ordinal */
};

struct kvl_cq_moderation_conf {
	bool enable;
	uint32_t count;
	uint32_t period_us;
	uint32_t signal_every;
};

struct kvl_memory_conf {
	uint32_t pool_size_mb;
	uint32_t chunk_size_kb;
	int hugepage; /* enum kvl_tristate */
};

struct kvl_gpu_conf {
	bool enable;
	uint32_t device_id;
	uint32_t vram_reserve_mb;
	int gpudirect; /* enum kvl_tristate */
};

struct kvl_sched_conf {
	uint32_t window_min_kb;
	uint32_t window_max_mb;
	uint32_t budget_mb; /* staging budget when no GPU is configured */
	uint32_t resize_interval_ms;
	/* the scheduler on each NIC lcore (0 staging: none, the request API is off) */
	uint32_t staging_mb; /* PULL staging per NIC lcore */
	uint32_t slot_kb;    /* one staging slot: the largest block a request may name */
	uint32_t max_msg_kb; /* largest merged READ; 0: no coalescing */
	uint32_t starvation_ms;
	uint32_t ready_ahead;  /* steps announced READY and not DONE per request; 0: no bound */
	uint32_t max_requests; /* open requests per NIC lcore */
	uint32_t max_blocks;   /* blocks over all open requests per NIC lcore */
	bool null_transport;   /* scheduler posts complete at once, nothing moves */
	bool null_transport_ack;
	int staging;		 /* enum kvl_staging_place */
	bool tier;		 /* serve this host's KV tier (KVL_PEER_LOCAL_TIER) into staging */
	uint32_t tier_rate_mbps; /* the tier's READs paced to this (a modelled link); 0: not */
	int tier_copy;		 /* enum kvl_tier_copy */
};

struct kvl_control_conf {
	char listen[KVL_ADDR_LEN];
	char secret_file[KVL_PATH_LEN]; /* "" = control path off; resolved against the INI's dir */
	bool secret_group_readable;	/* mode 0640 allowed (a group-managed secret) */
	char peers[KVL_MAX_PEERS][KVL_ADDR_LEN];
	uint32_t n_peers;
	uint32_t connect_timeout_ms;
	uint32_t heartbeat_interval_ms;
	uint32_t peer_timeout_ms;
	int tls; /* 0 off, 1 on: TLS 1.3 (external PSK from the secret) under every TCP connection
		  */
};

struct kvl_telemetry_conf {
	bool enable;
	char prometheus_listen[KVL_ADDR_LEN]; /* "": off */
};

/* ---- [eal] (issue 17): EAL's arguments when kvl_start() is passed none ---- */
#define KVL_EAL_LCORES_LEN 128
#define KVL_EAL_ARGS_LEN   256

/* What an engine that embeds kvlane (no command line of its own for EAL) gives EAL. */
struct kvl_eal_conf {
	char lcores[KVL_EAL_LCORES_LEN];   /* --lcores map ("0@(0-1),1@1"); "": EAL's default */
	uint32_t memory_mb;		   /* -m; 0: EAL's default */
	char file_prefix[KVL_NAME_LEN];	   /* --file-prefix; "": EAL's default (rte) */
	bool in_memory;			   /* --in-memory (hugepages, no files) */
	bool no_huge;			   /* --no-huge (anonymous memory; not with in_memory) */
	bool no_pci;			   /* --no-pci */
	char extra_args[KVL_EAL_ARGS_LEN]; /* more EAL options, split on blanks */
};
/* ---- end [eal] ---- */

/* ---- [cluster] (issue 19): membership through etcd (runtime/cluster.c) ---- */
#define KVL_CLUSTER_ENDPOINTS_LEN 512 /* etcd_endpoints: comma-separated URLs */
#define KVL_CLUSTER_MAX_ENDPOINTS 8
#define KVL_CLUSTER_URL_LEN	  128 /* one of them */

enum kvl_cluster_role {
	KVL_CLUSTER_PREFILL = 0,
	KVL_CLUSTER_DECODE,
	KVL_CLUSTER_TIER,
};

/* Off while etcd_endpoints is empty (the default): then nothing of it runs. */
struct kvl_cluster_conf {
	char etcd_endpoints[KVL_CLUSTER_ENDPOINTS_LEN]; /* "http://h:p,https://h:p" */
	char name[KVL_NAME_LEN];      /* unique in the cluster; "": [runtime] name */
	char cluster[KVL_NAME_LEN];   /* the default prefix's last part */
	char prefix[KVL_PATH_LEN];    /* "": /kvlane/<cluster> */
	int role;		      /* enum kvl_cluster_role */
	char advertise[KVL_ADDR_LEN]; /* "": control.listen as bound */
	uint32_t lease_ttl_s;
	uint32_t request_timeout_ms; /* one etcd call, at most */
	char tls_ca_file[KVL_PATH_LEN];
	char tls_cert_file[KVL_PATH_LEN];
	char tls_key_file[KVL_PATH_LEN];
	char user[KVL_NAME_LEN];
	char password_file[KVL_PATH_LEN];
};

const char *kvl_cluster_role_name(int r);
/* ---- end [cluster] ---- */

/* Where each value came from, for messages that name file and line. 0 = default. */
struct kvl_conf_origin {
	uint32_t section_line;
	uint32_t key_line[KVL_MAX_SECT_KEYS];
};

enum kvl_section_id {
	KVL_SEC_RUNTIME = 0,
	KVL_SEC_CQ_MODERATION,
	KVL_SEC_MEMORY,
	KVL_SEC_GPU,
	KVL_SEC_SCHED,
	KVL_SEC_CONTROL,
	KVL_SEC_TELEMETRY,
	KVL_SEC_EAL,
	KVL_SEC_CLUSTER,
	KVL_SEC_NIC,	 /* repeated: [nic.<label>] */
	KVL_SEC_SEGMENT, /* repeated: [segment.<label>] */
	KVL_SEC_COUNT,
};

struct kvl_config {
	char path[KVL_PATH_LEN]; /* file it was read from ("" for defaults) */
	struct kvl_runtime_conf runtime;
	struct kvl_cq_moderation_conf cq_moderation;
	struct kvl_memory_conf memory;
	struct kvl_gpu_conf gpu;
	struct kvl_sched_conf sched;
	struct kvl_control_conf control;
	struct kvl_telemetry_conf telemetry;
	struct kvl_eal_conf eal;
	struct kvl_cluster_conf cluster;
	struct kvl_nic_conf nics[KVL_MAX_NICS];
	uint32_t n_nics;
	struct kvl_segment_conf segments[KVL_MAX_SEG_CONF];
	uint32_t n_segments;

	struct kvl_conf_origin origin[KVL_SEC_NIC]; /* singleton sections */
	struct kvl_conf_origin nic_origin[KVL_MAX_NICS];
	struct kvl_conf_origin seg_origin[KVL_MAX_SEG_CONF];
};

/*
 * Errors found while loading. Every message has the form
 *   FILE:LINE: SECTION.KEY: what was expected, what was found
 * (LINE is the key's line, or its section's line for a missing key).
 */
#define KVL_CONF_MAX_ERRORS 32
#define KVL_CONF_MSG_LEN    320

struct kvl_conf_errors {
	unsigned count;	  /* errors recorded (at most KVL_CONF_MAX_ERRORS kept) */
	unsigned dropped; /* errors beyond the cap */
	char msg[KVL_CONF_MAX_ERRORS][KVL_CONF_MSG_LEN];
};

/*
 * Bytes of a segment of @layers x @planes x @blocks blocks of @block_bytes: 0 with *@out set,
 * or -EOVERFLOW when the product does not fit 64 bits (checked before it wraps). The INI, the
 * API's kvl_seg_alloc / kvl_seg_register and the descriptor builder all size segments here.
 */
static inline int kvl_seg_bytes(uint32_t layers, uint32_t planes, uint32_t blocks,
				uint32_t block_bytes, uint64_t *out)
{
	uint64_t v = layers;

	if (__builtin_mul_overflow(v, (uint64_t)planes, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)blocks, &v) ||
	    __builtin_mul_overflow(v, (uint64_t)block_bytes, &v))
		return -EOVERFLOW;
	*out = v;
	return 0;
}

/* Fill @cfg with every default (no NIC). */
void kvl_config_defaults(struct kvl_config *cfg);

/*
 * Parse and validate an INI file into @cfg. Returns 0, or -EINVAL with every problem found
 * in @errs (parsing goes on after an error so that one run reports them all), or another
 * negative errno when the file cannot be read (also described in @errs).
 */
int kvl_config_load(const char *path, struct kvl_config *cfg, struct kvl_conf_errors *errs);

/*
 * Same, then apply @n_sets overrides "section.key=value" (kvlaned --set), each as if it were
 * the last line of its section, replacing what the file said. Errors in an override read
 * "--set:N: section.key: ..." (N counts the overrides from 1).
 */
int kvl_config_load_sets(const char *path, const char *const *sets, unsigned n_sets,
			 struct kvl_config *cfg, struct kvl_conf_errors *errs);

/* Same, from a string; @name stands for the file name in messages. */
int kvl_config_load_string(const char *name, const char *text, struct kvl_config *cfg,
			   struct kvl_conf_errors *errs);

/* Write the effective configuration (defaults filled in) as INI that loads back to it. */
int kvl_config_print(FILE *out, const struct kvl_config *cfg);

/*
 * Normalise a PCI address as sysfs names functions: lower-case hex, 4-digit domain added when
 * missing ("3B:00.0" and CUDA's "00000000:3B:00.0" both become "0000:3b:00.0"). Here, the
 * lowest library, because the INI's [nic.*] gpu key is checked with it; the topology and
 * the runtime (matching cudaDeviceGetPCIBusId) use the same one.
 * Returns 0, or -EINVAL when @in is not [domain:]bus:device.function.
 */
int kvl_pci_addr_normalize(const char *in, char *out, size_t cap);

/*
 * Line of @key in element @idx of section @sec (its section's line when the key was not
 * written, or came from --set); 0 when neither is known (defaults). For errors found after
 * loading, e.g. a [nic.*] gpu address that names no GPU of this host.
 */
unsigned kvl_config_key_line(const struct kvl_config *cfg, int sec, unsigned idx, const char *key);

/* Names of enum values, for printing. */
const char *kvl_idle_policy_name(int p);
const char *kvl_transport_name(int t);
const char *kvl_tristate_name(int t);
const char *kvl_seg_access_name(int a);
const char *kvl_seg_fill_name(int f);
const char *kvl_seg_memory_name(int m);
const char *kvl_staging_place_name(int p);
const char *kvl_tier_copy_name(int m);

/*
 * Walk every key of the effective configuration, with its value as text, in file order:
 * singleton sections first, then each [nic.<label>]. Used by --print-config and telemetry.
 * @fn returns non-zero to stop the walk.
 */
typedef int (*kvl_config_visit_fn)(void *arg, const char *section, const char *key,
				   const char *value);
int kvl_config_visit(const struct kvl_config *cfg, kvl_config_visit_fn fn, void *arg);

/*
 * The schema, for documentation checks: calls @fn for every key the parser accepts, with its
 * section name ("nic.*" for NIC sections), key name and default text.
 */
typedef void (*kvl_schema_visit_fn)(void *arg, const char *section, const char *key,
				    const char *def);
void kvl_config_schema_visit(kvl_schema_visit_fn fn, void *arg);

#endif /* KVL_RUNTIME_CONFIG_H */
