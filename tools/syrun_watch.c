/*
 * syrun_watch.c — what outlives a SIGKILL of syrun (tools/syrun.c): its private directory and what its ranks
 * started. The ranks themselves die with syrun (PR_SET_PDEATHSIG, set in syrun's child before exec); a watcher
 * process, started before the ranks, kills their process groups and removes the directory when syrun is gone
 * without having cleaned up.
 */
#include "syrun_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYRUN_WATCH_MAX 256 /* ranks: syrun's limit */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  remove(path);
  return 0;
}

void syrun_remove_dir(const char *dir) {
  if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
    fprintf(stderr, "syrun: could not remove %s: %s\n", dir, strerror(errno));
}

/* The watcher: a process of its own group (a signal to syrun's group spares it) reading a pipe only syrun
 * writes: each rank's pid as it starts, then 0 once syrun has cleaned up. End of file without the 0 means
 * syrun died without cleaning up (SIGKILL): the ranks die with it (PR_SET_PDEATHSIG), and the watcher kills
 * their process groups (what they started), waits up to a second for them to go, and removes the directory. */
static void watch(int fd, const char *dir) {
  pid_t groups[SYRUN_WATCH_MAX];
  int n = 0, done = 0;
  pid_t pid;
  ssize_t got;
  while ((got = read(fd, &pid, sizeof pid)) == (ssize_t)sizeof pid || (got < 0 && errno == EINTR)) {
    if (got < 0) continue;
    if (pid == 0) done = 1;
    else if (n < SYRUN_WATCH_MAX) groups[n++] = pid;
  }
  if (done) return;
  for (int i = 0; i < n; i++) kill(-groups[i], SIGKILL);
  for (int tries = 0; tries < 100; tries++) {
    int left = 0;
    for (int i = 0; i < n; i++) left += kill(-groups[i], 0) == 0;
    if (!left) break;
    usleep(10000);
  }
  syrun_remove_dir(dir);
}

int syrun_watch_start(const char *dir, const int close_fds[2]) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    close(fds[1]);
    close(close_fds[0]);
    close(close_fds[1]);
    int null_fd = open("/dev/null", O_RDWR); /* a reader of syrun's stdout sees its end when syrun ends */
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      if (null_fd > 1) close(null_fd);
    }
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE}; /* meant for syrun, which cleans up itself */
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    watch(fds[0], dir);
    _exit(0);
  }
  close(fds[0]);
  return fds[1];
}

void syrun_watch_note(int fd, pid_t pid) {
  if (fd >= 0 && write(fd, &pid, sizeof pid) != (ssize_t)sizeof pid) { /* no watcher: nothing to tell */
  }
}
