/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Message continuations (Strumpen's mcont): a callback bound to a request,
 * run once the message has left or arrived, by whichever thread drives
 * progress. Registration and completion meet under the engine lock, so a
 * callback runs exactly once whatever the interleaving: registered before
 * completion, it runs in the completion handler; after, it is deferred to
 * the next progress step (never inside ovl_continue itself).
 *
 * ovl_continue_mpi adopts a plain MPI request: it becomes one more op in the
 * engine, so existing MPI code gains continuations one call at a time.
 */
#include "ovl_internal.h"

#include <stdlib.h>

static int continue_entered(const char *fname, ovl_request_t req, struct ovl__req *r,
                            ovl_continue_fn fn, void *arg);

int ovl_continue(ovl_request_t req, ovl_continue_fn fn, void *arg)
{
    static const char *fname = "ovl_continue";
    int rc;
    struct ovl__req *r;
    if ((rc = ovl__check_init(fname)))
        return rc;
    if (!fn)
        return ovl__error(OVL_ERR_ARG, fname, "callback is NULL");
    if (req == OVL_REQUEST_NULL || ovl__req_lookup(req, &r) != OVL_SUCCESS)
        return ovl__error(OVL_ERR_REQUEST, fname, "invalid or released request handle");
    /* registered with the engine of the request's domain */
    struct ovl__dom *prev;
    if ((rc = ovl__dom_enter_checked(fname, r->dom, &prev)))
        return rc;
    rc = continue_entered(fname, req, r, fn, arg);
    ovl__dom_leave(prev);
    return rc;
}

static int continue_entered(const char *fname, ovl_request_t req, struct ovl__req *r,
                            ovl_continue_fn fn, void *arg)
{
    ovl__engine_lock();
    /* The lookup above ran without the lock: another thread may since have
     * waited on a copy of the handle (the slot may even hold a new request
     * now) or freed it. Re-validate the generation and pin the slot, so no
     * ovl_wait/ovl_test/ovl_request_free releases it while the continuation
     * is registered. A request freed with ovl_request_free belongs to the
     * engine: nobody could wait for its continuation. */
    if (ovl__req_pin(req, r) != OVL_SUCCESS) {
        ovl__engine_unlock();
        return ovl__error(OVL_ERR_REQUEST, fname,
                          "request %p was released (waited on, tested complete or freed)",
                          (void *)req);
    }
    if (r->detached) {
        ovl__req_unpin(req, r);
        ovl__engine_unlock();
        return ovl__error(OVL_ERR_REQUEST, fname, "request %p was already freed", (void *)req);
    }
    if (r->cont_registered) {
        ovl__req_unpin(req, r);
        ovl__engine_unlock();
        return ovl__error(OVL_ERR_BUSY, fname, "the request already has a continuation");
    }
    r->cont = fn;
    r->cont_arg = arg;
    r->cont_registered = 1;
    /* polled at the callback pace from now on; a pending delta receive's
     * pieces are no longer patient */
    ovl__engine_continuation_locked(r);
    if (r->completed) {
        /* Already finished: run at the next progress step, and hold back
         * `done` so that ovl_wait still returns only after the callback
         * (a waiter that saw it set finds it withdrawn when it claims the
         * request, request.c). */
        atomic_store(&r->done, 0);
        ovl__engine_defer_callback(r);
    }
    ovl__req_unpin(req, r);
    ovl__engine_unlock();
    return OVL_SUCCESS;
}

struct user_op {
    struct ovl__op op;
    ovl_mpi_continue_fn fn;
    void *arg;
};

static void user_done(struct ovl__op *op, MPI_Status *st)
{
    struct user_op *u = (struct user_op *)op;
    struct ovl__tls *t = ovl__tls();
    double t0 = ovl__trace_on ? ovl__now_us() : 0;
    t->in_callback++;
    u->fn(st, u->arg);
    t->in_callback--;
    if (ovl__trace_on)
        ovl__trace_complete("cont", "mpi-continuation", t0, ovl__now_us() - t0, "source",
                            st->MPI_SOURCE, "tag", st->MPI_TAG, NULL, 0);
    atomic_fetch_add_explicit(&ovl__g.st_callbacks, 1, memory_order_relaxed);
    free(u);
}

int ovl_continue_mpi(MPI_Request *mpireq, ovl_mpi_continue_fn fn, void *arg)
{
    static const char *fname = "ovl_continue_mpi";
    int rc;
    if ((rc = ovl__check_init(fname)))
        return rc;
    if (!mpireq || !fn)
        return ovl__error(OVL_ERR_ARG, fname, "%s is NULL",
                          mpireq ? "callback" : "request pointer");
    if (*mpireq == MPI_REQUEST_NULL)
        return ovl__error(OVL_ERR_ARG, fname, "request is MPI_REQUEST_NULL");
    struct user_op *u = calloc(1, sizeof *u);
    if (!u)
        return ovl__error(OVL_ERR_NOMEM, fname, "no memory for the continuation");
    u->op.mreq = *mpireq;
    u->op.done = user_done;
    u->op.ctx = u;
    u->op.kind = OVL__OP_USER;
    u->fn = fn;
    u->arg = arg;
    if ((rc = ovl__engine_post(&u->op, NULL)) != OVL_SUCCESS) {
        free(u);
        return ovl__error(rc, fname, "no memory to track the request");
    }
    *mpireq = MPI_REQUEST_NULL;
    return OVL_SUCCESS;
}
