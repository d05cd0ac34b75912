/*
 * hase_mps.h - what the parts of the slurm-hase SPANK plugin share (hase_mps.c: options and
 * the task environment; hase_mps_gpus.c: the task's GPUs in the MPS server's numbering).
 * Functions here are hidden: the plugin exports only Slurm's SPANK symbols.
 */
#ifndef HASE_MPS_H
#define HASE_MPS_H

#include <stdint.h>

#include <slurm/spank.h>

#define HASE_PATH_MAX 1024
#define HASE_TAG_MAX 64
#define HASE_GPUS_MAX 64        /* GPUs in a list (slurm-gpus, SLURM_STEP_GPUS, SLURM_JOB_GPUS) */
#define HASE_GPU_LIST_MAX 4096  /* bytes in such a list, with its terminating NUL */
#define HASE_GPU_FILE "slurm-gpus"  /* in <pipe_dir>/<jobid>: written by the MPS prolog */

#define HASE_HIDDEN __attribute__((visibility("hidden")))

/* spank_setenv(NAME=VALUE) in the task, overwriting; logs and returns -1 on failure. */
HASE_HIDDEN int set_env(spank_t sp, const char *name, const char *value);

/* Set the task's CUDA_VISIBLE_DEVICES to its step's GPUs in the numbering of the job's MPS
 * server (<pipe_base>/<job_id>/slurm-gpus); logs one line and leaves it as it is when that
 * cannot be worked out. Never fails the task. */
HASE_HIDDEN void set_server_devices(spank_t sp, const char *pipe_base, uint32_t job_id);

#endif
