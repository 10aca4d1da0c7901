/*
 * test_bench_options.c — the built sy-bench (SY_BIN_DIR/sy-bench) refuses, before it runs anything, what it would
 * otherwise ignore or find out only after the run: an option the chosen entry does not read, a bad SY_BACKEND, a
 * --json file it cannot write, the host backend under a launcher's world, -c beyond 0|1, an empty --tokens item,
 * an unknown option or entry (one line each); each with exit 2 and a message that names the cause.
 */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define SY_BENCH SY_BIN_DIR "/sy-bench"

/* Runs `env ENV sy-bench ARGS` (ENV may be "") with no launcher's variables nor SY_BACKEND from outside, stdout and
 * stderr together; checks exit 2 and `needle` in them. */
static void refused(const char *env, const char *args, const char *needle, int line) {
  char cmd[1024], out[4096] = "";
  snprintf(cmd, sizeof cmd,
           "env -u SY_WORLD_SIZE -u WORLD_SIZE -u SLURM_NTASKS -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u SY_BACKEND %s %s "
           "%s 2>&1",
           env, SY_BENCH, args);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  if (!p) return;
  const size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 2 || !strstr(out, needle))
    fprintf(stderr, "line %d: sy-bench %s: exit %d, want 2 and \"%s\"; output:\n%s\n", line, args, code, needle, out);
  CHECK_EQ_INT(code, 2);
  CHECK(strstr(out, needle) != NULL);
}
#define REFUSED(env, args, needle) refused(env, args, needle, __LINE__)

int main(void) {
  REFUSED("", "--backend host --tokens 4096 attn",
          "--tokens applies to moe-ll, moe-ht and layer, not attn; attn takes -t/-T");
  REFUSED("", "--backend host --wire fp8 alltoall", "--wire applies to moe-ll and moe-ht, not alltoall");
  REFUSED("", "--backend host -T 64 layer", "-T applies to attn, moe-ll and moe-ht, not layer; layer takes --tokens");
  REFUSED("", "--backend host --seed 3 moe-ht", "--seed applies to soak, not moe-ht");
  REFUSED("SY_BACKEND=hots", "alltoall", "SY_BACKEND=hots is not auto, cuda or host");
  REFUSED("", "--backend host --json /nonexistent/x.json alltoall", "--json /nonexistent/x.json: No such file");
  REFUSED("SY_WORLD_SIZE=2", "--backend host alltoall",
          "run sy-bench without a launcher and pick the ranks with --world");
  REFUSED("", "--backend host -c 2 alltoall", "-c 2: want 0 or 1");
  REFUSED("", "--backend host -e 1K alltoall", "the default --minbytes 65536 is larger than --maxbytes 1024");
  REFUSED("", "--backend host --tokens 1,,32 moe-ll", "--tokens 1,,32: an empty item");
  /* a mistake gets one line, not the whole usage; --name=value reads as --name value */
  REFUSED("", "--bogus alltoall", "unknown option --bogus (sy-bench --help lists the options)");
  REFUSED("", "nothing", "no entry named nothing; the entries: alltoall attn");
  REFUSED("", "--backend=host --wire=fp8 alltoall", "--wire applies to moe-ll and moe-ht, not alltoall");
  return check_report();
}
