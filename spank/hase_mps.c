/*
 * hase_mps.c - SPANK plugin for slurm-hase MPS GPU sharing.
 *
 * Options (registered with spank_option_register so sbatch/salloc see them too):
 *   --hase-mps=PERCENT       share of one GPU's SMs (1..100) for this job's tasks
 *   --hase-share-tag=STR     a label ([A-Za-z0-9_.-], <= 63) passed on as SLURM_HASE_SHARE_TAG;
 *                            nothing acts on it: it does not restrict who shares a GPU
 *
 * Local/allocator context (srun, sbatch, salloc): validates the values (a bad value
 * makes the command fail with a clear message) and exports SLURM_HASE_MPS /
 * SLURM_HASE_SHARE_TAG into the job control environment, which Slurm hands to the
 * Prolog/Epilog as SPANK_SLURM_HASE_MPS / SPANK_SLURM_HASE_SHARE_TAG.
 *
 * Remote context (slurmstepd), for every task of a job the MPS prolog started a daemon for
 * (<pipe_dir>/<jobid>/control exists); the trigger is the prolog's: --hase-mps, or
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in the job's environment (slurmd sets it for --gres=mps:N):
 *   CUDA_MPS_PIPE_DIRECTORY=<pipe_dir>/<jobid>
 *   CUDA_MPS_LOG_DIRECTORY=<log_dir>/<jobid>
 *   CUDA_VISIBLE_DEVICES=<the step's GPUs in the MPS server's numbering>
 * and, with --hase-mps only, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=PERCENT, SLURM_HASE_MPS=PERCENT
 * (and SLURM_HASE_SHARE_TAG when given). The server numbers the GPUs the prolog gave its daemon
 * from 0, in the order the prolog wrote their Slurm numbers to <pipe_dir>/<jobid>/slurm-gpus;
 * the task gets the places there of its step's GPUs (SLURM_STEP_GPUS, else SLURM_JOB_GPUS).
 * When that cannot be worked out, one error line says why and CUDA_VISIBLE_DEVICES stays as
 * Slurm set it (the task still runs). Without a daemon, --hase-mps logs one error line and
 * leaves the task's environment alone (CUDA would look for a daemon that is not there); when
 * the check fails otherwise (the job's user cannot enter pipe_dir), any MPS job logs why.
 * In every task, CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY naming another job's directory
 * under pipe_dir / log_dir (inherited by a job submitted from an MPS job's tasks) are unset.
 * The directories match what templates/mps-prolog.sh.j2 starts the daemon with.
 *
 * plugstack.conf arguments (all optional; `hase gpu mps render` prints the matching line):
 *   pipe_dir=/run/hase-mps  log_dir=/var/log/hase-mps
 * Absolute paths of at most HASE_PATH_MAX-1 characters from [A-Za-z0-9_@%+=:,./-].
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "hase_mps.h"

SPANK_PLUGIN(hase_mps, 1);


static int mps_percent = 0; /* 0 = option not given */
static char share_tag[HASE_TAG_MAX] = "";
static char pipe_base[HASE_PATH_MAX] = "/run/hase-mps";
static char log_base[HASE_PATH_MAX] = "/var/log/hase-mps";

/* Parse a percentage 1..100 written in decimal digits only, as the MPS prolog takes it; return
 * it, or -1 for anything else. strtol alone also took leading blanks and a sign (" 50", "+50"). */
static int parse_percent(const char *text)
{
    char *end = NULL;
    long value;
    const char *p;

    if (text == NULL || *text == '\0')
        return -1;
    for (p = text; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
    }
    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 1 || value > 100)
        return -1;
    return (int)value;
}

static int valid_tag(const char *text)
{
    size_t i, n;

    if (text == NULL)
        return 0;
    n = strlen(text);
    if (n == 0 || n >= HASE_TAG_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = text[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok)
            return 0;
    }
    return 1;
}

static int opt_mps(int val, const char *optarg, int remote)
{
    int pct = parse_percent(optarg);

    (void)val;
    (void)remote;
    if (pct < 0) {
        slurm_error("hase_mps: --hase-mps=%s is invalid: expected an integer "
                    "percentage of one GPU from 1 to 100 (e.g. --hase-mps=50)",
                    optarg ? optarg : "");
        return -1;
    }
    mps_percent = pct;
    return 0;
}

static int opt_tag(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    if (!valid_tag(optarg)) {
        slurm_error("hase_mps: --hase-share-tag=%s is invalid: use 1-%d characters "
                    "from [A-Za-z0-9_.-]", optarg ? optarg : "", HASE_TAG_MAX - 1);
        return -1;
    }
    snprintf(share_tag, sizeof(share_tag), "%s", optarg);
    return 0;
}

static struct spank_option hase_options[] = {
    {"hase-mps", "PERCENT",
     "slurm-hase: share a GPU through NVIDIA MPS using PERCENT (1-100) of its SMs",
     1, 0, opt_mps},
    {"hase-share-tag", "TAG",
     "slurm-hase: a label for this job's GPU sharing, handed to its prolog and tasks as "
     "SLURM_HASE_SHARE_TAG; not enforced: jobs with other tags may share its GPU",
     1, 0, opt_tag},
    SPANK_OPTIONS_TABLE_END
};

/* Characters a directory argument may hold: the ones `hase gpu mps render` accepts. */
static int path_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_@%+=:,./-", c) != NULL;
}

/* Store plugstack.conf argument KEY=VALUE (an absolute directory) in dst, or explain why not. */
static int set_dir(char *dst, const char *key, const char *value)
{
    size_t i, n = strlen(value);

    if (value[0] != '/') {
        slurm_error("hase_mps: plugstack argument '%s=%s' is invalid: expected an absolute path",
                    key, value);
        return -1;
    }
    if (n >= HASE_PATH_MAX) {
        slurm_error("hase_mps: plugstack argument %s= is too long (%lu characters, at most %d)",
                    key, (unsigned long)n, HASE_PATH_MAX - 1);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (!path_char_ok(value[i]))
            break;
    }
    if (i < n) {
        slurm_error("hase_mps: plugstack argument '%s=%s' is invalid: character %lu is not one "
                    "of A-Z a-z 0-9 _@%%+=:,./-", key, value, (unsigned long)i + 1);
        return -1;
    }
    memcpy(dst, value, n + 1);
    return 0;
}

/* Read plugstack.conf arguments pipe_dir= and log_dir=. */
static int parse_args(int ac, char **av)
{
    int i;

    for (i = 0; i < ac; i++) {
        if (strncmp(av[i], "pipe_dir=", 9) == 0) {
            if (set_dir(pipe_base, "pipe_dir", av[i] + 9) != 0)
                return -1;
        } else if (strncmp(av[i], "log_dir=", 8) == 0) {
            if (set_dir(log_base, "log_dir", av[i] + 8) != 0)
                return -1;
        } else {
            slurm_error("hase_mps: unknown plugstack argument '%s' "
                        "(expected pipe_dir=/abs/path or log_dir=/abs/path)", av[i]);
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    struct spank_option *opt;

    if (parse_args(ac, av) != 0)
        return -1;
    for (opt = hase_options; opt->name != NULL; opt++) {
        spank_err_t rc = spank_option_register(sp, opt);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("hase_mps: cannot register --%s: %s", opt->name,
                        spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* srun/sbatch/salloc: hand the choice to the Prolog/Epilog (as SPANK_SLURM_HASE_*). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    char buf[16];
    spank_context_t ctx = spank_context();

    (void)ac;
    (void)av;
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR)
        return 0;
    if (mps_percent > 0) {
        snprintf(buf, sizeof(buf), "%d", mps_percent);
        if (spank_job_control_setenv(sp, "SLURM_HASE_MPS", buf, 1) != ESPANK_SUCCESS) {
            slurm_error("hase_mps: cannot export SLURM_HASE_MPS to the prolog");
            return -1;
        }
    }
    if (share_tag[0] != '\0' &&
        spank_job_control_setenv(sp, "SLURM_HASE_SHARE_TAG", share_tag, 1) != ESPANK_SUCCESS) {
        slurm_error("hase_mps: cannot export SLURM_HASE_SHARE_TAG to the prolog");
        return -1;
    }
    return 0;
}

int set_env(spank_t sp, const char *name, const char *value)
{
    spank_err_t rc = spank_setenv(sp, name, value, 1);

    if (rc != ESPANK_SUCCESS) {
        slurm_error("hase_mps: cannot set %s: %s", name, spank_strerror(rc));
        return -1;
    }
    return 0;
}

/* buf = BASE/JOB_ID[SUFFIX]; fails (with a message) instead of truncating. */
static int job_path(char *buf, size_t size, const char *base, uint32_t job_id, const char *suffix)
{
    int n = snprintf(buf, size, "%s/%u%s", base, (unsigned int)job_id, suffix);

    if (n < 0 || (size_t)n >= size) {
        slurm_error("hase_mps: %s/%u%s is too long (at most %lu characters)", base,
                    (unsigned int)job_id, suffix, (unsigned long)size - 1);
        return -1;
    }
    return 0;
}

/* Whether the job's environment holds a non-empty CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, which
 * slurmd sets for --gres=mps:N and the MPS prolog starts a daemon for. */
static int gres_mps_job(spank_t sp)
{
    char value[16];
    spank_err_t rc = spank_getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value, sizeof(value));

    return rc == ESPANK_NOSPACE || (rc == ESPANK_SUCCESS && value[0] != '\0');
}

/* Unset NAME when the job's environment points it at another job's directory under BASE
 * (BASE/<other id>[/...]): a job submitted from an MPS job's tasks inherits that job's
 * CUDA_MPS_* directories, and its CUDA would join the other job's daemon. Anything else (a
 * node-wide daemon's directory, this job's own) stays. */
static int drop_other_jobs_dir(spank_t sp, const char *name, const char *base, uint32_t job_id)
{
    char value[HASE_PATH_MAX + 32];
    char own[16];
    size_t n = strlen(base), k;
    spank_err_t rc = spank_getenv(sp, name, value, sizeof(value));

    if (rc != ESPANK_SUCCESS || strncmp(value, base, n) != 0 || value[n] != '/')
        return 0;
    snprintf(own, sizeof(own), "%u", (unsigned int)job_id);
    k = strlen(own);
    if (strncmp(value + n + 1, own, k) == 0 && (value[n + 1 + k] == '\0' || value[n + 1 + k] == '/'))
        return 0;
    slurm_debug("hase_mps: job %u: dropping %s=%s (another job's MPS daemon)",
                (unsigned int)job_id, name, value);
    rc = spank_unsetenv(sp, name);
    if (rc != ESPANK_SUCCESS) {
        slurm_error("hase_mps: cannot unset %s (%s, another job's MPS daemon): %s", name, value,
                    spank_strerror(rc));
        return -1;
    }
    return 0;
}

/* slurmstepd, in each task before exec: point CUDA at the job's MPS daemon, if it has one, and
 * never at another job's. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    uint32_t job_id = 0;
    char pct[16];
    char path[HASE_PATH_MAX + 32];

    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return 0;
    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
        if (mps_percent <= 0 && !gres_mps_job(sp))
            return 0; /* not an MPS job: no reason to fail its tasks */
        slurm_error("hase_mps: cannot read the job id");
        return -1;
    }
    if (drop_other_jobs_dir(sp, "CUDA_MPS_PIPE_DIRECTORY", pipe_base, job_id) != 0 ||
        drop_other_jobs_dir(sp, "CUDA_MPS_LOG_DIRECTORY", log_base, job_id) != 0)
        return -1;
    if (mps_percent <= 0 && !gres_mps_job(sp))
        return 0;
    if (job_path(path, sizeof(path), pipe_base, job_id, "/control") != 0)
        return -1;
    if (access(path, F_OK) != 0) {
        int err = errno;

        if (err != ENOENT) {
            /* not "no daemon": this user cannot look (a pipe_dir only root may enter) */
            slurm_error("hase_mps: job %u: the task runs without MPS: cannot check %s: %s "
                        "(the job's user must be able to enter pipe_dir)",
                        (unsigned int)job_id, path, strerror(err));
            return 0;
        }
        /* no daemon: a gres/mps job on a node without the MPS prolog stays silent */
        if (mps_percent > 0)
            slurm_error("hase_mps: --hase-mps=%d ignored, the task runs without MPS: no MPS "
                        "daemon for job %u (%s is missing: no GPU allocated, the allocation "
                        "was made without --hase-mps, or the MPS prolog failed)",
                        mps_percent, (unsigned int)job_id, path);
        return 0;
    }
    if (mps_percent > 0) {
        snprintf(pct, sizeof(pct), "%d", mps_percent);
        if (set_env(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct) != 0 ||
            set_env(sp, "SLURM_HASE_MPS", pct) != 0)
            return -1;
    }
    if (job_path(path, sizeof(path), pipe_base, job_id, "") != 0 ||
        set_env(sp, "CUDA_MPS_PIPE_DIRECTORY", path) != 0)
        return -1;
    if (job_path(path, sizeof(path), log_base, job_id, "") != 0 ||
        set_env(sp, "CUDA_MPS_LOG_DIRECTORY", path) != 0)
        return -1;
    if (share_tag[0] != '\0' && set_env(sp, "SLURM_HASE_SHARE_TAG", share_tag) != 0)
        return -1;
    set_server_devices(sp, pipe_base, job_id);
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    mps_percent = 0;
    share_tag[0] = '\0';
    return 0;
}
