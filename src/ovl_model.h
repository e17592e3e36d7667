/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: model.c: the performance model.
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_MODEL_H
#define OVL_INTERNAL_MODEL_H

/* ---- model.c ---------------------------------------------------------- */

/* Where the figures in force came from (OVL_STATS prints it). */
enum { OVL__MODEL_DEFAULTS, OVL__MODEL_INIT, OVL__MODEL_PERFDB };

#define OVL__MAP_MAX    64 /* cells of the protocol map */
#define OVL__MAP_NPROTO 4  /* protocols it covers: OVL_PLAN_DATATYPE .. OVL_PLAN_PACK */
#define OVL__LOAD_MAX   64 /* most concurrent flows the load table holds */

struct ovl__model {
    double lat_us;        /* one-way small-message time (L) */
    double bw_Bpus;       /* bytes per microsecond (1/G) */
    double fault_us;      /* cost of one access fault (I) of the monitor in use */
    size_t eager;         /* eager/rendezvous switch of the MPI library */
    size_t piece_switch;  /* smallest message size whose one-way time jumps
                          * (a protocol change below the eager limit, such as
                          * UCX's TCP copy-to-zero-copy switch); 0 = none seen */
    double oneway_us[16]; /* one-way time of the sizes of ovl__measure_switch_sizes
                           * (measured at init; 0 = not measured) */
    size_t burst_B;       /* bytes of a message the link passes in one burst before
                           * its long-run rate applies (a shaper's token bucket, a
                           * switch buffer): the one-way time of 128 KiB less what
                           * the long-run rate explains; 0 = none */
    double poll_sleep_us; /* one poll-interval sleep of the progress thread, as
                           * it really lasts (0: no progress thread) */
    int calibrated;
    /* LogGP and HUNT 5.1 terms; the defaults are conservative guesses,
     * replaced by the performance database (perfdb.c) or the quick estimate
     * at ovl_init. */
    double o_us;                             /* per-message CPU overhead o = o_s + o_r */
    double gap_us;                           /* g: minimum interval between two messages */
    double rtt_us;                           /* round trip of a small message */
    double fault_mprotect_us, fault_uffd_us; /* I per backend (<= 0: unknown) */
    double prot_base_us;                     /* M(N) = prot_base_us + N * prot_page_us (mprotect) */
    double prot_page_us;
    double uffd_wp_base_us; /* the same for userfaultfd write-protect */
    double uffd_wp_page_us;
    double compute_us_per_B; /* C(n) >= n * this: memory-to-cache rate */
    double rma_lat_us;       /* MPI_Rget of a small block, round trip */
    double rma_bw_Bpus;      /* MPI_Rget bandwidth */
    /* The share of a transfer's time a computing rank does not pay
     * (ovl__measure_hidden): of the main link, and of the link to a peer on
     * this rank's node, whose latency and bandwidth are kept apart from the
     * main link's too (< 0, 0: not measured) */
    double hidden;
    double node_lat_us, node_bw_Bpus, node_hidden;
    int node_overlap; /* overlap can pay with a peer on this node (ovl__model_direct) */
    /* The planner's protocol maps (perfdb table plan_map, ovl-calibrate
     * --maps): one strip of `runs` runs of `run_B` bytes (stride 2 x run_B)
     * read into a dense buffer, per protocol (us[q - 1] for
     * ovl_plan_protocol_t q; < 0: not measured) */
    struct ovl__map_cell {
        double run_B, runs, us[OVL__MAP_NPROTO];
    } map[OVL__MAP_MAX];
    int nmap;
    /* Bandwidth per flow when `flows` flows cross the link at once (perfdb
     * table loaded, ovl-calibrate --loaded): loaded_Bpus[flows], 0 = not
     * measured; the loop-nest planner's load estimation */
    double loaded_Bpus[OVL__LOAD_MAX + 1];
    int source;              /* OVL__MODEL_* */
    int db_link;             /* a perfdb's `link`: 0 not given, 1 intra-node, 2 inter-node */
    double init_us;          /* time ovl_init spent measuring */
    char source_detail[320]; /* perfdb path, or why it was not used */
};
extern struct ovl__model ovl__m;
/* Collective (inside ovl_init): load the performance database, or measure
 * a quick estimate of latency, bandwidth, fault and copy cost. */
int ovl__model_calibrate(void);
/* The eager limit as model.c detects it without measuring (OVL_EAGER_LIMIT,
 * MPI_T, UCX_RNDV_THRESH, 64 KiB). */
size_t ovl__model_detect_eager(void);
/* The smallest message the MPI library sends by rendezvous, as far as the
 * model knows: the protocol switch measured below the eager limit, else
 * the eager limit. */
size_t ovl__model_rendezvous_bytes(void);
/* The protocol map's time of one strip of @runs runs of @run_B bytes under
 * planner protocol @proto (1 .. OVL__MAP_NPROTO): interpolated between the
 * measured cells around it (log-log, bilinear); < 0 outside the measured
 * grid, or no map. */
double ovl__model_map_us(int proto, double run_B, double runs);
/* Bandwidth of one of @flows flows crossing the link at once, bytes per
 * microsecond: the load table's (ovl-calibrate --loaded), linear between
 * measured counts, the last measured one's share beyond them; < 0: no
 * table (no load estimation). */
double ovl__model_flow_Bpus(int flows);
/* M(N): predicted cost of protecting @npages pages with @mon's mechanism. */
double ovl__model_protect_us(ovl_monitor_t mon, size_t npages);

/* The performance database (perfdb.c; format in docs/PERFDB.md). */
/* Default path: $XDG_CACHE_HOME/ovl/perfdb, else $HOME/.cache/ovl/perfdb.
 * Returns @buf, or NULL if neither variable is set. */
char *ovl__perfdb_default_path(char *buf, size_t len);
/* Read @path into @m (only the fields it holds). Returns 0, -1 if the file
 * does not exist, -2 if it is unusable (corrupt, truncated, another MPI);
 * @why says which and why. Never crashes on any input. */
int ovl__perfdb_load(const char *path, struct ovl__model *m, char *why, size_t why_len);
/* The MPI library's version string as the perfdb header stores it: first
 * line of MPI_Get_library_version, trimmed. */
void ovl__perfdb_mpi_id(char *buf, size_t len);

/* Whether and how to split a transfer into strips (HUNT 5.1, 5.3). */
enum ovl__split_reason {
    OVL__SPLIT_YES,         /* split: both HUNT 5.1 inequalities hold */
    OVL__SPLIT_SMALL,       /* too small: first strip cannot pay its setup */
    OVL__SPLIT_NO_OVERLAP,  /* second strip would not be covered */
    OVL__SPLIT_NO_GAIN,     /* inequalities hold but the predicted time is not lower */
    OVL__SPLIT_LOCAL,       /* peer is this rank, or on its node and reached directly */
    OVL__SPLIT_TRAIN,       /* front end: others outstanding, piggybacked (5.3) */
    OVL__SPLIT_NONBLOCKING, /* front end: explicit non-blocking call (5.3) */
    OVL__SPLIT_HINT,        /* front end: a user hint decided */
    OVL__SPLIT_NREASONS
};
/* Short name of a reason, for OVL_STATS. */
const char *ovl__split_reason_name(int reason);
struct ovl__split {
    int should_split;
    int reason;        /* enum ovl__split_reason */
    int nstrips;       /* 1 when not split */
    size_t first;      /* first strip in bytes (page multiple unless the whole transfer) */
    double growth;     /* strip k+1 = growth * strip k (1.0: equal strips) */
    double t_plain_us; /* predicted time: one guarded transfer, unsplit */
    double t_split_us; /* predicted time with the chosen strips */
    const char *why;   /* one line, static storage */
};
/* Decide how to move @bytes to/from @peer, assuming the data is then read
 * in order at the memory-to-cache rate (the worst case HUNT 5.1 uses).
 * Returns 0; *out always filled. */
int ovl__model_split(size_t bytes, int peer, struct ovl__split *out);
/* Smallest transfer that the model splits (HUNT 5.1's lower bound);
 * SIZE_MAX if none up to 1 GiB. */
size_t ovl__model_split_threshold(int peer);
/* The peer whose link the model's figures describe: the first rank on
 * another node, else a neighbour on this one (rank ^ 1), else this rank. */
int ovl__model_link_peer(void);
/* A get/put with @peer completes inside the call, unsplit and unguarded:
 * @peer is on this rank's node and OVL_RMA_LOCAL=direct, or =auto (the
 * default) and the model found that overlap cannot pay with a peer on
 * this node (ovl__m.node_overlap), or @peer is this rank (rma.c). */
int ovl__model_direct(int peer);
/* Overlap pays on a link whose wire time per byte is @G_us_per_B, of which
 * a computing rank does not pay @hidden (ovl__measure_hidden), against the
 * copy per byte overlap adds (@copy_us_per_B): hidden x G > copy. */
int ovl__model_overlap_pays(double hidden, double G_us_per_B, double copy_us_per_B);
/* MPI moves bytes between this rank and @peer with this rank's own CPU
 * (ovl__model_direct), and the progress thread has no CPU of its own
 * (ovl__g.cpus_per_rank): polling such a transfer early only takes that
 * CPU from the computation, so it waits for the program's own calls. */
int ovl__model_cpu_bound(int peer);
/* ovl__model_cpu_bound for every peer: all ranks on this node, reached
 * directly, and this rank has no CPU to spare. */
int ovl__model_all_cpu_bound(void);
/* Size of strip @k (0-based) of a split @bytes transfer. */
size_t ovl__model_strip_size(const struct ovl__split *s, size_t bytes, int k);
/* Transfers smaller than this, posted while others are outstanding, are
 * not guarded: their synchronisation piggybacks on the last guarded one
 * (HUNT 5.3's "train"). */
size_t ovl__model_piggyback_threshold(void);
/* Delta size for a message of @bytes produced at @rate bytes/us (0 =
 * unknown), fault-triggered or annotated. */
size_t ovl__model_delta_size(size_t bytes, double rate, int faults);
/* The production rate (bytes/us) a delta send of @cap bytes to @peer is
 * sized with: the median of the last five sends of the same size, peer and
 * triggering (@faults: a fault monitor, not explicit), else the last send
 * of any kind; 0 if none. */
double ovl__delta_rate_for(size_t cap, int peer, int faults);
/* Largest delta piece (receivers size their buffers with it). */
size_t ovl__model_max_delta(void);
/* Default stream fragment size (OVL_FRAGMENT_SIZE=0): the smallest power of
 * two from 4 KiB to 64 KiB, and within the eager switch, whose per-message
 * overhead o is at most 5 % of its wire time (F >= 20 o B). */
size_t ovl__model_fragment_size(void);
/* A delta piece whose message (header and bytes) is @len bytes is copied
 * and sent contiguous (under the protocol switch), not as a struct. */
int ovl__model_copy_piece(size_t len);

/* One-sided transfers (rma.c): strip sizes for a transfer of @bytes from
 * @peer (HUNT 5.1); fills sizes[0..n) (n <= max) and returns n, 1 = no split;
 * *reason: the decision's enum ovl__split_reason (not counted). */
size_t ovl__model_strips(size_t bytes, int peer, size_t *sizes, size_t max, int *reason);

#endif /* OVL_INTERNAL_MODEL_H */
