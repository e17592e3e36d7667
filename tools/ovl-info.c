/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-info: what ovl will use on this machine, and why. Prints the access
 * monitor that OVL_MONITOR (default auto) resolves to, the outcome for each
 * monitor, and the system facts behind the choice. Needs no MPI launch.
 * It asks the library's own resolver (ovl_monitor_probe), so it reports
 * what ovl_init picks here: uffd falls back to mprotect where userfaultfd
 * is unavailable; without a writable /proc/self/mem auto gives explicit
 * (a warning) and a fault monitor asked for by name makes ovl_init fail.
 *
 *   ovl-info            human-readable report
 *   ovl-info --monitor  just the name of the monitor ovl_init picks
 *                       ("unavailable", exit 1, where ovl_init fails)
 */
#include <ovl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void show_file(const char *label, const char *path)
{
    char buf[64] = "unreadable";
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f))
            strcpy(buf, "empty");
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
    }
    printf("  %-28s %s\n", label, buf);
}

int main(int argc, char **argv)
{
    ovl_monitor_t want = OVL_MONITOR_AUTO, got;
    const char *env = getenv("OVL_MONITOR");
    static const ovl_monitor_t all[] = { OVL_MONITOR_AUTO, OVL_MONITOR_UFFD, OVL_MONITOR_MPROTECT,
                                         OVL_MONITOR_EXPLICIT };
    if (env && *env) {
        int found = 0;
        for (int i = 0; i < 4; i++)
            if (!strcasecmp(env, ovl_monitor_name(all[i]))) {
                want = all[i];
                found = 1;
            }
        if (!found) {
            fprintf(stderr,
                    "ovl-info: OVL_MONITOR=\"%s\": expected auto, uffd, mprotect or explicit\n",
                    env);
            return 2;
        }
    }
    char why[512];
    int rc = ovl_monitor_probe(want, &got, why, sizeof why);
    /* OVL_ERR_UNSUPPORTED: uffd asked for, ovl_init takes the fallback in
     * got; OVL_ERR_MONITOR: ovl_init fails */
    const int works = rc == OVL_SUCCESS || rc == OVL_ERR_UNSUPPORTED;
    if (argc > 1 && !strcmp(argv[1], "--monitor")) {
        puts(works ? ovl_monitor_name(got) : "unavailable");
        return works ? 0 : 1;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: ovl-info [--monitor]\n");
        return 2;
    }
    printf("ovl %d.%d.%d\n", OVL_VERSION_MAJOR, OVL_VERSION_MINOR, OVL_VERSION_PATCH);
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    ver[strcspn(ver, "\n")] = 0;
    printf("MPI library: %s\n", ver);
#if MPI_VERSION >= 4
    printf("MPI-4 partitioned communication: yes (MPI %d.%d)\n", MPI_VERSION, MPI_SUBVERSION);
#else
    printf("MPI-4 partitioned communication: no (MPI %d.%d)\n", MPI_VERSION, MPI_SUBVERSION);
#endif
#if defined(OVL_HAVE_MPIX_STREAM)
    const char *vcis = getenv("MPIR_CVAR_CH4_RESERVE_VCIS");
    printf("MPIX streams (MPICH): yes (MPIX_Stream_create; reserve them with "
           "MPIR_CVAR_CH4_RESERVE_VCIS)\n");
    printf("Communication domains: serialized and private ones on an MPIX stream each (%s%s), "
           "shared ones on duplicates of ovl's communicator\n",
           vcis && *vcis ? "MPIR_CVAR_CH4_RESERVE_VCIS=" : "none reserved now: duplicates",
           vcis && *vcis ? vcis : "");
#else
    printf("MPIX streams (MPICH): no\n");
    printf("Communication domains: duplicates of ovl's communicator (no MPIX streams)\n");
#endif
    printf("\nAccess monitor (OVL_MONITOR=%s): %s\n", env && *env ? env : "auto, the default",
           works ? ovl_monitor_name(got) : "UNAVAILABLE (ovl_init fails with OVL_ERR_MONITOR)");
    printf("  why: %s\n", why);
    if (want == OVL_MONITOR_EXPLICIT)
        printf("  NOTE: ovl_init refuses OVL_MONITOR=explicit (OVL_ERR_CONFIG): the explicit "
               "monitor is chosen in code (ovl_config_t.monitor, or a request's ovl_param_t)\n");
    if (works && got == OVL_MONITOR_EXPLICIT && want != OVL_MONITOR_EXPLICIT)
        printf("  WARNING: no fault monitor works here: delta receives and gets complete inside "
               "the call, without overlap, unless the code chooses OVL_MONITOR_EXPLICIT and calls "
               "ovl_delta_need/ovl_get_need\n");
    printf("\nEach monitor:\n");
    for (int i = 1; i < 4; i++) {
        rc = ovl_monitor_probe(all[i], &got, why, sizeof why);
        printf("  %-9s %-11s %s\n", ovl_monitor_name(all[i]),
               rc == OVL_SUCCESS ? "available" : "unavailable", why);
    }
    printf("\nSystem facts:\n");
    printf("  %-28s %ld bytes\n", "page size", sysconf(_SC_PAGESIZE));
    printf("  %-28s %s\n", "running as root", geteuid() == 0 ? "yes" : "no");
    printf("  %-28s %s\n", "/dev/userfaultfd",
           access("/dev/userfaultfd", R_OK | W_OK) == 0 ? "usable" : "absent or not permitted");
    show_file("vm.unprivileged_userfaultfd", "/proc/sys/vm/unprivileged_userfaultfd");
    show_file("vm.max_map_count", "/proc/sys/vm/max_map_count");
    /* as the library found it: a protected page written through it */
    rc = ovl_monitor_probe(OVL_MONITOR_MPROTECT, &got, NULL, 0);
    printf("  %-28s %s\n", "/proc/self/mem writable",
           rc == OVL_SUCCESS ? "yes" : "no (fault monitors need it)");
    return 0;
}
