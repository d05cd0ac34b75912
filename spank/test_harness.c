/*
 * test_harness.c - a stand-in for Slurm's SPANK host, used by tests/unit/test_spank*.py.
 *
 * Usage: test_harness PLUGIN.so local|allocator|remote JOBID [plugarg...] -- [name=value...]
 * Loads the plugin, runs init (with plugargs), calls each option's callback, then
 * init_post_opt and (remote only) task_init, printing every SPANK call it sees:
 *   register NAME | usage NAME TEXT | cb NAME=VALUE rc=N | jcsetenv NAME=VALUE | setenv NAME=VALUE |
 *   unsetenv NAME | error MESSAGE | debug MESSAGE | hook NAME rc=N
 * spank_getenv reads the harness's own environment as the job's.
 * Exits 1 as soon as something fails, like srun does.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#define MAX_OPTS 16

static struct spank_option registered[MAX_OPTS];
static int n_registered = 0;
static spank_context_t context = S_CTX_LOCAL;
static uint32_t job_id = 0;

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
    (void)sp;
    if (n_registered >= MAX_OPTS)
        return ESPANK_ERROR;
    registered[n_registered++] = *opt;
    printf("register %s\n", opt->name);
    printf("usage %s %s\n", opt->name, opt->usage);
    return ESPANK_SUCCESS;
}

spank_context_t spank_context(void) { return context; }

int spank_remote(spank_t sp)
{
    (void)sp;
    return context == S_CTX_REMOTE;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    va_list ap;
    (void)sp;
    if (item != S_JOB_ID || context != S_CTX_REMOTE)
        return ESPANK_BAD_ARG;
    va_start(ap, item);
    *va_arg(ap, uint32_t *) = job_id;
    va_end(ap);
    return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
    (void)sp;
    (void)overwrite;
    if (context != S_CTX_REMOTE)
        return ESPANK_NOT_REMOTE;
    printf("setenv %s=%s\n", var, val);
    return ESPANK_SUCCESS;
}

spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
    (void)sp;
    if (context != S_CTX_REMOTE)
        return ESPANK_NOT_REMOTE;
    printf("unsetenv %s\n", var);
    unsetenv(var);
    return ESPANK_SUCCESS;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
    const char *value = getenv(var);

    (void)sp;
    if (context != S_CTX_REMOTE)
        return ESPANK_NOT_REMOTE;
    if (value == NULL)
        return ESPANK_ENV_NOEXIST;
    if ((int)strlen(value) >= len)
        return ESPANK_NOSPACE;
    strcpy(buf, value);
    return ESPANK_SUCCESS;
}

spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value,
                                     int overwrite)
{
    (void)sp;
    (void)overwrite;
    if (context != S_CTX_LOCAL && context != S_CTX_ALLOCATOR)
        return ESPANK_NOT_LOCAL;
    printf("jcsetenv %s=%s\n", name, value);
    return ESPANK_SUCCESS;
}

const char *spank_strerror(spank_err_t err)
{
    (void)err;
    return "harness error";
}

void slurm_error(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    printf("error ");
    vprintf(format, ap);
    printf("\n");
    va_end(ap);
}

void slurm_debug(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    printf("debug ");
    vprintf(format, ap);
    printf("\n");
    va_end(ap);
}

static int run_hook(void *lib, const char *name, int ac, char **av)
{
    spank_f *hook = (spank_f *)dlsym(lib, name);
    int rc;
    if (hook == NULL)
        return 0;
    rc = hook((spank_t)&registered, ac, av);
    printf("hook %s rc=%d\n", name, rc);
    return rc;
}

int main(int argc, char **argv)
{
    void *lib;
    int i, sep, remote;

    if (argc < 4) {
        fprintf(stderr, "usage: %s PLUGIN ctx JOBID [plugargs] -- [opt=val]\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[2], "remote") == 0)
        context = S_CTX_REMOTE;
    else if (strcmp(argv[2], "allocator") == 0)
        context = S_CTX_ALLOCATOR;
    remote = context == S_CTX_REMOTE;
    job_id = (uint32_t)strtoul(argv[3], NULL, 10);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        printf("dlopen %s\n", dlerror());
        return 2;
    }
    printf("plugin %s type %s\n", (const char *)dlsym(lib, "plugin_name"),
           (const char *)dlsym(lib, "plugin_type"));
    for (sep = 4; sep < argc && strcmp(argv[sep], "--") != 0; sep++)
        ;
    if (run_hook(lib, "slurm_spank_init", sep - 4, argv + 4) != 0)
        return 1;
    for (i = sep + 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        int j, rc = -1, found = 0;
        if (eq == NULL)
            return 2;
        *eq = '\0';
        for (j = 0; j < n_registered; j++) {
            if (strcmp(registered[j].name, argv[i]) == 0) {
                found = 1;
                rc = registered[j].cb(registered[j].val, eq + 1, remote);
                printf("cb %s=%s rc=%d\n", argv[i], eq + 1, rc);
            }
        }
        if (!found)
            printf("unknown option %s\n", argv[i]);
        if (rc != 0)
            return 1;
    }
    if (run_hook(lib, "slurm_spank_init_post_opt", 0, NULL) != 0)
        return 1;
    if (remote && run_hook(lib, "slurm_spank_task_init", 0, NULL) != 0)
        return 1;
    run_hook(lib, "slurm_spank_exit", 0, NULL);
    return 0;
}
