/*
 * hase_mps_gpus.c - the task's GPUs in the numbering of its job's MPS server (see hase_mps.c's
 * header: the server numbers the GPUs the prolog gave its daemon from 0, in the order of
 * <pipe_dir>/<jobid>/slurm-gpus; Slurm names them by their device numbers).
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

/* A list of GPUs: pointers into a caller's buffer. */
struct gpu_list {
    int n;
    char *item[HASE_GPUS_MAX];
};

/* Split TEXT (changed in place) at commas into LIST, dropping blanks around each entry. Returns
 * 0, or -1 with *WHY saying what is wrong (an empty entry, too many). */
static int split_gpus(char *text, struct gpu_list *list, const char **why)
{
    char *p = text;

    list->n = 0;
    for (;;) {
        char *start, *end, *comma, *next;

        while (*p != '\0' && isspace((unsigned char)*p))
            p++;
        start = p;
        comma = strchr(p, ',');
        end = comma != NULL ? comma : p + strlen(p);
        next = comma != NULL ? comma + 1 : NULL;
        while (end > start && isspace((unsigned char)end[-1]))
            end--;
        if (end == start) {
            *why = "an empty entry";
            return -1;
        }
        if (list->n >= HASE_GPUS_MAX) {
            *why = "more than 64 entries";
            return -1;
        }
        *end = '\0';
        list->item[list->n++] = start;
        if (next == NULL)
            return 0;
        p = next;
    }
}

static int all_digits(const char *text)
{
    if (*text == '\0')
        return 0;
    for (; *text != '\0'; text++) {
        if (*text < '0' || *text > '9')
            return 0;
    }
    return 1;
}

/* Whether A and B name the same GPU: equal numbers ("01" = "1"), else equal strings (UUIDs). */
static int same_gpu(const char *a, const char *b)
{
    if (all_digits(a) && all_digits(b)) {
        while (a[0] == '0' && a[1] != '\0')
            a++;
        while (b[0] == '0' && b[1] != '\0')
            b++;
    }
    return strcmp(a, b) == 0;
}

/* Read PATH, one line of at most HASE_GPU_LIST_MAX-1 bytes (blanks around it are dropped by
 * split_gpus), into BUF. Returns 0, or -1 with WHY (size WHY_SIZE) filled in. */
static int read_gpu_file(const char *path, char *buf, char *why, size_t why_size)
{
    FILE *f = fopen(path, "r");
    size_t n;
    char *nl, *p;

    if (f == NULL) {
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    n = fread(buf, 1, HASE_GPU_LIST_MAX, f);
    if (ferror(f)) {
        int err = errno;

        fclose(f);
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(err));
        return -1;
    }
    fclose(f);
    if (n >= HASE_GPU_LIST_MAX) {
        snprintf(why, why_size, "%s is malformed (longer than %d bytes)", path,
                 HASE_GPU_LIST_MAX - 1);
        return -1;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        snprintf(why, why_size, "%s is malformed (a NUL byte)", path);
        return -1;
    }
    nl = strchr(buf, '\n');
    if (nl != NULL) {
        for (p = nl; *p != '\0'; p++) {
            if (!isspace((unsigned char)*p)) {
                snprintf(why, why_size, "%s is malformed (more than one line)", path);
                return -1;
            }
        }
        *nl = '\0';
    }
    return 0;
}

/* Read the step's GPUs (SLURM_STEP_GPUS, else SLURM_JOB_GPUS: Slurm's device numbers) into BUF
 * and LIST. Returns 0; 1 when neither is set; -1 when one is unreadable or malformed (WHY says
 * which, and so it does for 1). */
static int read_step_gpus(spank_t sp, char *buf, struct gpu_list *list, char *why,
                          size_t why_size)
{
    static const char *const names[] = {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"};
    const char *bad;
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        spank_err_t rc = spank_getenv(sp, names[i], buf, HASE_GPU_LIST_MAX);

        if (rc == ESPANK_ENV_NOEXIST)
            continue;
        if (rc == ESPANK_NOSPACE) {
            snprintf(why, why_size, "%s is longer than %d bytes", names[i],
                     HASE_GPU_LIST_MAX - 1);
            return -1;
        }
        if (rc != ESPANK_SUCCESS) {
            snprintf(why, why_size, "cannot read %s: %s", names[i], spank_strerror(rc));
            return -1;
        }
        if (buf[0] == '\0')
            continue;
        /* the value is kept whole for the message: split a copy */
        {
            char copy[HASE_GPU_LIST_MAX];

            memcpy(copy, buf, strlen(buf) + 1);
            if (split_gpus(buf, list, &bad) != 0) {
                snprintf(why, why_size, "%s=%s is malformed (%s)", names[i], copy, bad);
                return -1;
            }
        }
        return 0;
    }
    snprintf(why, why_size, "neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS is set");
    return 1;
}

/* The job's MPS server numbers the GPUs its daemon serves from 0, in the order the prolog gave
 * them (listed by their Slurm numbers in <pipe_dir>/<jobid>/slurm-gpus); Slurm's
 * CUDA_VISIBLE_DEVICES holds global numbers, or with ConstrainDevices indices among the step's
 * GPUs: neither is the server's numbering. Set CUDA_VISIBLE_DEVICES to the places of the step's
 * GPUs in the daemon's list. When that cannot be done, log one error line and leave it: the task
 * never fails for this. */
void set_server_devices(spank_t sp, const char *pipe_base, uint32_t job_id)
{
    char path[HASE_PATH_MAX + 64];
    char served_buf[HASE_GPU_LIST_MAX];
    char served_text[HASE_GPU_LIST_MAX];
    char step_buf[HASE_GPU_LIST_MAX];
    char visible[HASE_GPU_LIST_MAX];
    char current[HASE_GPU_LIST_MAX];
    char why[HASE_PATH_MAX + 3 * HASE_GPU_LIST_MAX];
    struct gpu_list served, step;
    const char *bad;
    size_t used = 0;
    int i, j, n;
    spank_err_t rc;

    why[0] = '\0';
    n = snprintf(path, sizeof(path), "%s/%u/%s", pipe_base, (unsigned int)job_id, HASE_GPU_FILE);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        snprintf(why, sizeof(why), "the path of %s is too long", HASE_GPU_FILE);
        goto leave;
    }
    if (read_gpu_file(path, served_buf, why, sizeof(why)) != 0)
        goto leave;
    memcpy(served_text, served_buf, strlen(served_buf) + 1);
    if (split_gpus(served_buf, &served, &bad) != 0) {
        snprintf(why, sizeof(why), "%s is malformed (%s)", path, bad);
        goto leave;
    }
    n = read_step_gpus(sp, step_buf, &step, why, sizeof(why));
    if (n == 1 && served.n == 1) {
        /* a daemon on one GPU (every --gres=mps job: Slurm gives it one GPU a node) serves it
         * as device 0, whichever GPU of the job the task's step names */
        if (set_env(sp, "CUDA_VISIBLE_DEVICES", "0") == 0)
            return;
        snprintf(why, sizeof(why), "cannot set it to 0");
        goto leave;
    }
    if (n != 0)
        goto leave;
    visible[0] = '\0';
    for (i = 0; i < step.n; i++) {
        for (j = 0; j < served.n && !same_gpu(step.item[i], served.item[j]); j++)
            ;
        if (j == served.n) {
            snprintf(why, sizeof(why), "GPU %s of this step is not one the job's MPS daemon "
                     "serves (%s)", step.item[i], served_text);
            goto leave;
        }
        n = snprintf(visible + used, sizeof(visible) - used, "%s%d", i > 0 ? "," : "", j);
        if (n < 0 || (size_t)n >= sizeof(visible) - used) {
            snprintf(why, sizeof(why), "the device list is too long");
            goto leave;
        }
        used += (size_t)n;
    }
    if (set_env(sp, "CUDA_VISIBLE_DEVICES", visible) == 0)
        return;
    snprintf(why, sizeof(why), "cannot set it to %s", visible);
leave:
    rc = spank_getenv(sp, "CUDA_VISIBLE_DEVICES", current, sizeof(current));
    if (rc == ESPANK_ENV_NOEXIST)
        snprintf(current, sizeof(current), "unset");
    else if (rc == ESPANK_NOSPACE)
        snprintf(current, sizeof(current), "too long to show");
    else if (rc != ESPANK_SUCCESS)
        snprintf(current, sizeof(current), "unreadable: %s", spank_strerror(rc));
    slurm_error("hase_mps: job %u: CUDA_VISIBLE_DEVICES left as Slurm set it (%s), which may not "
                "name this task's GPUs in the MPS server's numbering: %s", (unsigned int)job_id,
                current, why);
}
