/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The performance database: the figures tools/ovl-calibrate measured, read
 * back by ovl_init into the model (model.c). The format (docs/PERFDB.md) is
 * plain text made for people and plot scripts: `key = value` lines whose
 * keys carry their unit, `#` comments, and `[table NAME]` ... `[end]`
 * sections with the size-dependent curves, which the runtime skips.
 *
 * The reader trusts nothing: every line is bounded, every number checked
 * for type and range, the required keys must all be there, the last line
 * (`complete = 1`) proves the file was not cut short, and a file measured
 * with another MPI library is refused. Any of these leaves the model as it
 * was and says why.
 */
#include "ovl_internal.h"

#include <errno.h>
#include <math.h> /* isfinite */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_LEN 4096

char *ovl__perfdb_default_path(char *buf, size_t len)
{
    const char *x = getenv("XDG_CACHE_HOME");
    const char *h = getenv("HOME");
    int n;
    if (x && *x == '/')
        n = snprintf(buf, len, "%s/ovl/perfdb", x);
    else if (h && *h)
        n = snprintf(buf, len, "%s/.cache/ovl/perfdb", h);
    else
        return NULL;
    return n > 0 && (size_t)n < len ? buf : NULL;
}

void ovl__perfdb_mpi_id(char *buf, size_t len)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    ver[0] = 0;
    MPI_Get_library_version(ver, &n);
    ver[sizeof ver - 1] = 0;
    ver[strcspn(ver, "\r\n")] = 0;
    char *e = ver + strlen(ver);
    while (e > ver && (e[-1] == ' ' || e[-1] == '\t'))
        *--e = 0;
    snprintf(buf, len, "%s", ver);
}

/* The scalar keys the runtime uses. `opt`: may be missing. A negative
 * value is allowed where `neg_ok` (-1: not available on that machine). */
struct key {
    const char *name;
    size_t off; /* into struct ovl__model; (size_t)-1: not stored */
    int is_size;
    double lo, hi;
    int opt, neg_ok;
};

#define F(field) offsetof(struct ovl__model, field)
#define NOSTORE  ((size_t)-1)
static const struct key keys[] = {
    { "lat_us", F(lat_us), 0, 1e-3, 1e7, 0, 0 },
    { "rtt_us", F(rtt_us), 0, 1e-3, 1e7, 0, 0 },
    { "o_us", F(o_us), 0, 0, 1e7, 0, 0 },
    { "gap_us", F(gap_us), 0, 0, 1e7, 0, 0 },
    { "G_us_per_B", NOSTORE, 0, 1e-9, 1e3, 0, 0 },
    { "eager_B", F(eager), 1, 1, 1e12, 0, 0 },
    { "piece_switch_B", F(piece_switch), 1, 0, 1e12, 1, 0 },
    { "burst_B", F(burst_B), 1, 0, 1e12, 1, 0 },
    { "fault_mprotect_us", F(fault_mprotect_us), 0, 1e-3, 1e7, 0, 1 },
    { "fault_uffd_us", F(fault_uffd_us), 0, 1e-3, 1e7, 1, 1 },
    { "protect_mprotect_base_us", F(prot_base_us), 0, 0, 1e7, 0, 0 },
    { "protect_mprotect_per_page_us", F(prot_page_us), 0, 0, 1e6, 0, 0 },
    { "protect_uffd_wp_base_us", F(uffd_wp_base_us), 0, 0, 1e7, 1, 1 },
    { "protect_uffd_wp_per_page_us", F(uffd_wp_page_us), 0, 0, 1e6, 1, 1 },
    { "compute_us_per_B", F(compute_us_per_B), 0, 1e-9, 1e3, 0, 0 },
    { "rma_get_lat_us", F(rma_lat_us), 0, 1e-3, 1e7, 1, 1 },
    { "rma_get_G_us_per_B", NOSTORE, 0, 1e-9, 1e3, 1, 1 },
    { "hidden", F(hidden), 0, 0, 1, 1, 1 },
    { "node_lat_us", F(node_lat_us), 0, 1e-3, 1e7, 1, 0 },
    { "node_G_us_per_B", NOSTORE, 0, 1e-9, 1e3, 1, 0 },
    { "node_hidden", F(node_hidden), 0, 0, 1, 1, 1 },
    /* header */
    { "ovl_perfdb_version", NOSTORE, 1, 1, 1, 0, 0 },
    { "ranks", NOSTORE, 1, 2, 1e7, 0, 0 },
    { "page_B", NOSTORE, 1, 512, 1e9, 0, 0 },
    { "complete", NOSTORE, 1, 1, 1, 0, 0 },
};
#undef F
enum { NKEYS = sizeof keys / sizeof keys[0] };

static int find_key(const char *k)
{
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].name, k))
            return i;
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = 0;
    return s;
}

static int parse_number(const char *s, double *out)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v))
        return -1;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return -1;
    *out = v;
    return 0;
}

/* One row of table plan_map: run_B runs datatype_us runs_us bbox_us [pack_us], sizes
 * whole and positive, times positive or -1 (not measured), each cell once. */
/* A table row of exactly @n numbers into @v (0), else -1 with @why. */
static int row_numbers(char *s, double *v, int n, const char *table, char *why, size_t why_len,
                       const char *path, int lineno)
{
    int k = 0, bad = 0;
    char *save = NULL;
    for (char *tok = strtok_r(s, " \t", &save); tok && !bad; tok = strtok_r(NULL, " \t", &save))
        bad = k == n || parse_number(tok, &v[k++]) != 0;
    if (bad || k != n) {
        snprintf(why, why_len, "%s:%d: %s row: expected %d numbers", path, lineno, table, n);
        return -1;
    }
    return 0;
}

static int map_row(char *s, struct ovl__map_cell *map, int *nmap, char *why, size_t why_len,
                   const char *path, int lineno)
{
    double v[2 + OVL__MAP_NPROTO];
    const int n = 2 + OVL__MAP_NPROTO;
    /* a row without pack_us (written before the PACK protocol) has it -1 */
    int k = 0;
    for (const char *c = s; *c; k++) {
        while (*c == ' ' || *c == '\t')
            c++;
        if (!*c)
            break;
        while (*c && *c != ' ' && *c != '\t')
            c++;
    }
    v[n - 1] = -1;
    if (row_numbers(s, v, k == n - 1 ? n - 1 : n, "plan_map", why, why_len, path, lineno))
        return -1;
    for (int i = 0; i < 2; i++)
        if (v[i] < 1 || v[i] > 1e12 || v[i] != (double)(long long)v[i]) {
            snprintf(why, why_len, "%s:%d: plan_map row: %s %g is not a whole number in [1, 1e12]",
                     path, lineno, i ? "runs" : "run_B", v[i]);
            return -1;
        }
    for (int i = 2; i < n; i++)
        if (v[i] != -1 && !(v[i] > 0 && v[i] <= 1e9)) {
            snprintf(why, why_len, "%s:%d: plan_map row: time %g out of range (0, 1e9] or -1", path,
                     lineno, v[i]);
            return -1;
        }
    for (int i = 0; i < *nmap; i++)
        if (map[i].run_B == v[0] && map[i].runs == v[1]) {
            snprintf(why, why_len, "%s:%d: plan_map row: cell %g x %g given twice", path, lineno,
                     v[0], v[1]);
            return -1;
        }
    if (*nmap == OVL__MAP_MAX) {
        snprintf(why, why_len, "%s:%d: plan_map: more than %d rows", path, lineno, OVL__MAP_MAX);
        return -1;
    }
    struct ovl__map_cell *c = &map[(*nmap)++];
    c->run_B = v[0];
    c->runs = v[1];
    for (int q = 0; q < OVL__MAP_NPROTO; q++)
        c->us[q] = v[2 + q];
    return 0;
}

/* One row of table loaded: flows (whole, 1 .. OVL__LOAD_MAX, each once)
 * and the bandwidth of one of them in MB/s (bytes per microsecond). */
static int load_row(char *s, double *loaded, char *why, size_t why_len, const char *path,
                    int lineno)
{
    double v[2];
    if (row_numbers(s, v, 2, "loaded", why, why_len, path, lineno))
        return -1;
    if (v[0] < 1 || v[0] > OVL__LOAD_MAX || v[0] != (double)(int)v[0]) {
        snprintf(why, why_len, "%s:%d: loaded row: flows %g is not a whole number in [1, %d]", path,
                 lineno, v[0], OVL__LOAD_MAX);
        return -1;
    }
    if (!(v[1] > 0 && v[1] <= 1e7)) {
        snprintf(why, why_len, "%s:%d: loaded row: %g MB/s out of range (0, 1e7]", path, lineno,
                 v[1]);
        return -1;
    }
    if (loaded[(int)v[0]] > 0) {
        snprintf(why, why_len, "%s:%d: loaded row: %g flows given twice", path, lineno, v[0]);
        return -1;
    }
    loaded[(int)v[0]] = v[1];
    return 0;
}

int ovl__perfdb_load(const char *path, struct ovl__model *m, char *why, size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? -1 : -2;
    }
    double val[NKEYS];
    int seen[NKEYS] = { 0 };
    struct ovl__map_cell map[OVL__MAP_MAX];
    int nmap = 0;
    double loaded[OVL__LOAD_MAX + 1] = { 0 };
    char mpi[256] = "", host[256] = "";
    int have_mpi = 0, in_table = 0, lineno = 0, rc = -2, link = 0;
    char *line = malloc(LINE_MAX_LEN + 2);
    if (!line) {
        fclose(f);
        snprintf(why, why_len, "%s: out of memory", path);
        return -2;
    }
    while (fgets(line, LINE_MAX_LEN + 2, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == LINE_MAX_LEN + 1 && line[n - 1] != '\n') {
            snprintf(why, why_len, "%s:%d: line longer than %d bytes", path, lineno, LINE_MAX_LEN);
            goto out;
        }
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        if (*s == '[') {
            if (!strcmp(s, "[end]")) {
                if (!in_table) {
                    snprintf(why, why_len, "%s:%d: [end] outside a table", path, lineno);
                    goto out;
                }
                in_table = 0;
            } else if (!strncmp(s, "[table ", 7) && s[strlen(s) - 1] == ']' && !in_table) {
                in_table = !strcmp(s, "[table plan_map]") ? 2
                           : !strcmp(s, "[table loaded]") ? 3
                                                          : 1;
            } else {
                snprintf(why, why_len, "%s:%d: unexpected \"%.40s\"", path, lineno, s);
                goto out;
            }
            continue;
        }
        if (in_table == 2) { /* the planner's protocol map: read */
            if (map_row(s, map, &nmap, why, why_len, path, lineno))
                goto out;
            continue;
        }
        if (in_table == 3) { /* bandwidth per flow under load: read */
            if (load_row(s, loaded, why, why_len, path, lineno))
                goto out;
            continue;
        }
        if (in_table)
            continue; /* the other curves are for people and plots */
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(why, why_len, "%s:%d: expected \"key = value\", got \"%.40s\"", path, lineno,
                     s);
            goto out;
        }
        *eq = 0;
        char *k = trim(s), *v = trim(eq + 1);
        for (char *c = k; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_')) {
                snprintf(why, why_len, "%s:%d: bad key \"%.40s\"", path, lineno, k);
                goto out;
            }
        if (!strcmp(k, "mpi_library")) {
            snprintf(mpi, sizeof mpi, "%s", v);
            have_mpi = 1;
            continue;
        }
        if (!strcmp(k, "hostname")) {
            snprintf(host, sizeof host, "%s", v);
            continue;
        }
        if (!strcmp(k, "link")) {
            link = !strcmp(v, "intra-node") ? 1 : !strcmp(v, "inter-node") ? 2 : 0;
            continue;
        }
        int i = find_key(k);
        if (i < 0)
            continue; /* informational keys, or from a newer ovl */
        double x;
        if (parse_number(v, &x) != 0) {
            snprintf(why, why_len, "%s:%d: %s = \"%.40s\" is not a number", path, lineno, k, v);
            goto out;
        }
        const struct key *d = &keys[i];
        int neg = d->neg_ok && x == -1;
        if (!neg && (x < d->lo || x > d->hi)) {
            snprintf(why, why_len, "%s:%d: %s = %g out of range [%g, %g]", path, lineno, k, x,
                     d->lo, d->hi);
            goto out;
        }
        if (d->is_size && x != (double)(long long)x) {
            snprintf(why, why_len, "%s:%d: %s = %g is not an integer", path, lineno, k, x);
            goto out;
        }
        val[i] = x;
        seen[i] = 1;
    }
    if (ferror(f)) {
        snprintf(why, why_len, "%s: read error", path);
        goto out;
    }
    for (int i = 0; i < NKEYS; i++)
        if (!seen[i] && !keys[i].opt) {
            if (!strcmp(keys[i].name, "complete"))
                snprintf(why, why_len, "%s: truncated (no \"complete = 1\" line)", path);
            else
                snprintf(why, why_len, "%s: missing key %s", path, keys[i].name);
            goto out;
        }
    if (in_table) {
        snprintf(why, why_len, "%s: truncated inside a table", path);
        goto out;
    }
    char here[256];
    ovl__perfdb_mpi_id(here, sizeof here);
    if (!have_mpi || strcmp(mpi, here) != 0) {
        snprintf(why, why_len, "%s was measured with another MPI (\"%.80s\", this is \"%.80s\")",
                 path, have_mpi ? mpi : "?", here);
        goto out;
    }
    /* Accepted: store. */
    for (int i = 0; i < NKEYS; i++) {
        if (!seen[i] || keys[i].off == NOSTORE)
            continue;
        char *p = (char *)m + keys[i].off;
        if (keys[i].is_size)
            *(size_t *)p = (size_t)val[i];
        else
            *(double *)p = val[i];
    }
    m->db_link = link;
    memcpy(m->map, map, sizeof map);
    m->nmap = nmap;
    memcpy(m->loaded_Bpus, loaded, sizeof loaded);
    m->bw_Bpus = 1.0 / val[find_key("G_us_per_B")];
    int rg = find_key("rma_get_G_us_per_B");
    if (seen[rg] && val[rg] > 0)
        m->rma_bw_Bpus = 1.0 / val[rg];
    /* the link within a node, kept apart from the main one: both or none */
    int nl = find_key("node_lat_us"), ng = find_key("node_G_us_per_B");
    if (seen[nl] && seen[ng])
        m->node_bw_Bpus = 1.0 / val[ng];
    else
        m->node_lat_us = -1;
    snprintf(why, why_len, "%s%s%s", path, host[0] ? " from host " : "", host);
    rc = 0;
out:
    free(line);
    fclose(f);
    return rc;
}
