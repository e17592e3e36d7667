/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Measurement (measure.c): the timed loops and the MPI traffic that produce
 * the figures the performance model (model.c) decides from. The quick
 * estimate at ovl_init and tools/ovl-calibrate take them from here, so the
 * two time a ping-pong, look for a protocol switch and rate a copy the
 * same way; what each figure then means for a decision is model.c's.
 */
#ifndef OVL_MEASURE_H
#define OVL_MEASURE_H

#include <mpi.h>
#include <stddef.h>

/* One-way times (round trip / 2) of @reps round trips of @bytes between
 * this rank and @peer on @comm, the lower rank sending first: each into
 * @samples (NULL: not kept); returns the best. Tag 1. */
double ovl__measure_pingpong(MPI_Comm comm, int peer, void *buf, int bytes, int reps,
                             double *samples);

/* Protocol switch below the eager limit: the sizes to measure (page
 * multiples up to min(the model's eager limit, @limit); the sizes of
 * ovl__m.oneway_us), and the first size after a jump in the one-way times
 * @t of sizes @sz (0 = no jump). */
size_t ovl__measure_switch_sizes(size_t *sz, int max, size_t limit);
size_t ovl__measure_find_switch(const size_t *sz, const double *t, int n, double lat);
/* Ping-pongs with @peer on @comm over the switch sizes that fit @buflen
 * bytes of @buf: the best of @rounds x @reps per size, taken in @rounds
 * passes over all sizes, into @oneway (16 entries); returns
 * ovl__measure_find_switch of them (latency @lat). */
size_t ovl__measure_switch(MPI_Comm comm, int peer, void *buf, size_t buflen, int rounds, int reps,
                           double lat, double *oneway);

/* The link's burst: how many of @bytes, whose one-way time is @oneway_us,
 * arrived sooner than latency @lat_us and the long-run rate @bw_Bpus
 * (bytes per us) allow (a token bucket); 0 if none. */
double ovl__measure_burst_B(double bytes, double oneway_us, double lat_us, double bw_Bpus);

/* What the quick estimate at ovl_init measures of the link (rank 0's
 * figures, on every rank). */
struct ovl__link_figures {
    double lat_us;        /* one-way time of 1 byte; 0 = not measured */
    double G_us_per_B;    /* inverse bandwidth; 0 = not measured */
    size_t piece_switch;  /* ovl__measure_switch; 0 = none */
    double oneway_us[16]; /* one-way times of the switch sizes */
    double burst_B;       /* ovl__measure_burst_B of 128 KiB */
};
/* Collective over @comm: rank 0 and @peer (-1: nobody) measure, every other
 * rank waits asleep, rank 0's figures are broadcast into @out. OVL_SUCCESS,
 * OVL_ERR_NOMEM, OVL_ERR_MPI (reported as ovl_init's). */
int ovl__measure_link(MPI_Comm comm, int peer, struct ovl__link_figures *out);

/* The eager/rendezvous switch of the link to @peer, by the pair (this rank
 * and @peer, both call it; nobody else): the smallest size at which a
 * blocking send from the lower rank waits for a receiver that posts late
 * by @late_us, doubling from @from up to @limit, then bisecting to @res
 * bytes; the best of @reps per size. 0 if no size up to @limit waited.
 * @buf holds @limit bytes on both ranks. Tags 4-6. */
size_t ovl__measure_rendezvous(MPI_Comm comm, int peer, void *buf, size_t from, size_t limit,
                               size_t res, int reps, double late_us);

/* Collective over @comm, as ovl__measure_link (rank 0 and @peer measure,
 * rank 0's answer on every rank): whether @guess bytes wait for a receiver
 * @late_us late, and if so the smallest size that does, to 512 B (one
 * send per size); 0 if @guess does not wait (or nobody measured). */
size_t ovl__measure_eager_below(MPI_Comm comm, int peer, size_t guess, double late_us);

/* The share of a transfer's time on the link to @peer that a computing
 * rank does not pay: @bytes exchanged each way while both ranks compute
 * for as long as the exchange alone takes, testing the requests every
 * 20 us of work; 3 of each alternated, (2 x alone - busy) / alone of the
 * fastest alone and the slowest busy, within 0 .. 1. 0: the
 * bytes move only with this rank's CPU (a copy through shared memory),
 * nothing to overlap; 1: the link moves them alone. Collective over
 * @comm as ovl__measure_link (rank 0 and @peer measure); -1 if nobody
 * measured (no memory, @peer <= 0). */
double ovl__measure_hidden(MPI_Comm comm, int peer, size_t bytes);

/* Memory-to-cache copy rate in microseconds per byte: @bytes (0: twice the
 * L2 cache, 4 to 32 MiB) copied @chunk bytes at a time into one buffer of
 * @chunk bytes, best of 3; -1 without memory. */
double ovl__measure_copy_rate(size_t bytes, size_t chunk);
/* The chunk both ovl_init's estimate and ovl-calibrate copy in: the model
 * reads one figure, so it is measured one way. */
#define OVL__COPY_CHUNK ((size_t)256 << 10)

/* How long a sleep of @us lasts, with the progress thread's timer slack:
 * the median of 5. */
double ovl__measure_sleep_us(unsigned us);

#endif
