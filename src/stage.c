/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Staging buffers: where MPI receives bytes that cannot go straight to
 * their place (a guarded page that only the access monitor may fill).
 * Used by get/put (rma.c) and by plain messages into a delta receive
 * (delta_recv.c).
 */
#include "ovl_internal.h"

#include <pthread.h>
#include <stdlib.h>

/* Whole pages of their own (MPI and the kernel write them; they must not
 * share a page with a guarded buffer edge), and kept for the next transfer:
 * a fresh mapping per transfer costs a page fault per page on the data
 * path. A few are cached, up to STAGE_KEEP bytes each. */

#define STAGE_SLOTS 4
#define STAGE_KEEP  ((size_t)64 << 20)
#define STAGE_SMALL ((size_t)64 << 10) /* a request this small may take one this large */

static struct {
    pthread_mutex_t lock;
    char *p[STAGE_SLOTS];
    size_t cap[STAGE_SLOTS];
} SC = { .lock = PTHREAD_MUTEX_INITIALIZER };

char *ovl__stage_get(size_t bytes, size_t *cap)
{
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&SC.lock);
    int best = -1;
    /* never a far larger one: it would leave its next large user a fresh
     * mapping (a delta message's edge bytes take a page or two, its bytes
     * megabytes) */
    size_t most = bytes > STAGE_SMALL / 16 ? 16 * bytes : STAGE_SMALL;
    for (int i = 0; i < STAGE_SLOTS; i++)
        if (SC.p[i] && SC.cap[i] >= bytes && SC.cap[i] <= most &&
            (best < 0 || SC.cap[i] < SC.cap[best]))
            best = i;
    if (best >= 0) {
        char *p = SC.p[best];
        *cap = SC.cap[best];
        SC.p[best] = NULL;
        pthread_mutex_unlock(&SC.lock);
        return p;
    }
    pthread_mutex_unlock(&SC.lock);
    size_t ps = ovl__watch_page();
    *cap = (bytes + ps - 1) / ps * ps;
    return ovl__page_alloc(bytes);
}

void ovl__stage_put(char *p, size_t cap)
{
    if (!p)
        return;
    if (cap <= STAGE_KEEP) {
        pthread_mutex_lock(&SC.lock);
        int slot = -1;
        for (int i = 0; i < STAGE_SLOTS && slot < 0; i++)
            if (!SC.p[i])
                slot = i;
        if (slot < 0) { /* replace the smallest if this one is larger */
            slot = 0;
            for (int i = 1; i < STAGE_SLOTS; i++)
                if (SC.cap[i] < SC.cap[slot])
                    slot = i;
            if (SC.cap[slot] >= cap)
                slot = -1;
            else
                ovl__page_free(SC.p[slot]);
        }
        if (slot >= 0) {
            SC.p[slot] = p;
            SC.cap[slot] = cap;
            p = NULL;
        }
        pthread_mutex_unlock(&SC.lock);
    }
    ovl__page_free(p);
}

void ovl__stage_drop_all(void)
{
    pthread_mutex_lock(&SC.lock);
    for (int i = 0; i < STAGE_SLOTS; i++) {
        ovl__page_free(SC.p[i]);
        SC.p[i] = NULL;
        SC.cap[i] = 0;
    }
    pthread_mutex_unlock(&SC.lock);
}
