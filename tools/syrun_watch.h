/*
 * syrun_watch.h — syrun's directory removal and its watcher (tools/syrun_watch.c): the safety net for a
 * SIGKILL of syrun, which no handler sees.
 */
#ifndef SY_TOOLS_SYRUN_WATCH_H
#define SY_TOOLS_SYRUN_WATCH_H

#include <sys/types.h>

/* Removes dir and everything in it; says so on stderr when that fails (a missing dir is not a failure). */
void syrun_remove_dir(const char *dir);

/* Starts the watcher of dir (call before starting ranks; close_fds: syrun's own pipe, closed in the watcher).
 * Returns the write end of the watcher's pipe, close-on-exec so ranks do not hold it, or -1 (errno set). */
int syrun_watch_start(const char *dir, const int close_fds[2]);

/* Tells the watcher a rank's pid (its process group) as it starts, or 0 once syrun has cleaned up itself. */
void syrun_watch_note(int fd, pid_t pid);

#endif
